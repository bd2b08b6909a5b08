# Host code shared by every trainer: each host/*.cpp becomes one object in HOST_OBJS.
# HOST_LIBS: nothing beyond libc and libstdc++ so far.
HOST_OBJS := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard host/*.cpp))
HOST_LIBS :=
