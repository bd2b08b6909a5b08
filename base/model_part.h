// Parts of the model in ParamLayout order (base/gpt_config.h): what one rank holds of the weights or
// of the optimizer state, with the ParamLayout ranges they belong at. This is how checkpoints stay
// universal: each rank writes the part it is responsible for together with its ranges, the parts of
// all ranks cover the model exactly once whatever the mesh and ZeRO stage that cut them, and a run on
// any other mesh puts them back together without knowing how they were cut.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/ranks.h"

// `length` consecutive elements starting at element `offset` of ParamLayout order.
struct LayoutRange {
    uint64_t offset, length;
};

// values[k] for the elements the ranges list, in order.
struct ModelPart {
    std::vector<LayoutRange> ranges;
    std::vector<float> values;
};

// The fp32 master weights and AdamW moments of the same elements.
struct OptimizerPart {
    std::vector<LayoutRange> ranges;
    std::vector<float> master, m, v;
};

// The one range of a whole model of `total` parameters.
std::vector<LayoutRange> whole_model_ranges(size_t total);
// Elements the ranges list.
size_t ranges_size(const std::vector<LayoutRange>& ranges);
// Appends [offset, offset + length) to ranges, merged with the last range where they touch.
void append_range(std::vector<LayoutRange>* ranges, uint64_t offset, uint64_t length);

// Writes values into *whole at the ranges (whole has the model's size).
void scatter_part(const std::vector<LayoutRange>& ranges, const float* values, std::vector<float>* whole);

// Counts, per element of a model of `total`, how many parts wrote it; fail_if_incomplete names what
// was assembled when an element was written twice or never.
struct Coverage {
    explicit Coverage(size_t total) : count(total, 0) {}
    std::vector<uint8_t> count;
    // Fails with an InputError naming `what` when a range falls outside the model or covers an
    // element a part already wrote.
    void add(const std::vector<LayoutRange>& ranges, const std::string& what);
    void fail_if_incomplete(const std::string& what) const;
};

// The whole model on rank 0, from every rank's part (a collective over `ranks`; the others get an
// empty vector). The parts must cover the model of `total` parameters exactly once.
std::vector<float> assemble_on_rank0(const ModelPart& mine, size_t total, RankGroup& ranks);
