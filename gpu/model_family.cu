// The registered model families (model_family.h): adding a family adds its files and one line here.
#include "gpu/model_family.h"

#include "base/errors.h"

extern const Family GPT2_FAMILY;    // gpu/gpt2_family.cu
extern const Family LLAMA3_FAMILY;  // gpu/llama_family.cu

static const Family* const FAMILIES[] = {
    &GPT2_FAMILY,
    &LLAMA3_FAMILY,
};

const Family& family_of(const ModelConfig& config) {
    for (const Family* family : FAMILIES)
        if (family->id == config.family) return *family;
    fail("-e (--model): the GPU model has no family %d (%s)", (int)config.family, family_name(config.family));
}
