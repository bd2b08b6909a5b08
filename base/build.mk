# The basics every other folder builds on (errors, files and formats, random numbers, the model's
# configuration, the model interface): each base/*.cpp becomes one object in BASE_OBJS.
BASE_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard base/*.cpp))
