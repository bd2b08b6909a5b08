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

// Where a rank keeps elements of ParamLayout order in an array of its own: the `length` elements from
// `offset` on go to index `at` onwards.
struct PlacedRange {
    uint64_t offset, length, at;
};
// An array of `size` elements and which of the model's elements go where in it (an element no range
// names, e.g. padding, stays zero). Ranges may come in any order.
struct Placement {
    std::vector<PlacedRange> ranges;
    size_t size = 0;
};
// The whole model of `total` elements in ParamLayout order.
Placement whole_model_placement(size_t total);
// The placed array, from the whole model's values.
std::vector<float> place(const Placement& placement, const std::vector<float>& whole);

// One range of one part, as Coverage keeps it: the part's values [first_value, first_value + length)
// belong at [offset, offset + length) of the model.
struct CoveredRange {
    uint64_t offset, length;
    size_t part, first_value;
};

// Checks that parts cover a model of `total` elements exactly once, from their ranges alone (its
// memory grows with the ranges, not with the model).
class Coverage {
public:
    explicit Coverage(size_t total) : total_(total) {}
    // Adds a part's ranges (in the order of its values), failing with an InputError naming `what`
    // when a range falls outside the model.
    void add(const std::vector<LayoutRange>& ranges, const std::string& what);
    // Every part's ranges sorted by offset, once checked to tile the model: an InputError names the
    // part that holds an element another part holds too, or `what` where an element is missing.
    std::vector<CoveredRange> tiles(const std::string& what) const;
    void fail_if_incomplete(const std::string& what) const { tiles(what); }

private:
    size_t total_;
    std::vector<CoveredRange> ranges_;
    std::vector<std::string> parts_;
};

// The whole model on rank 0, from every rank's part (a collective over `ranks`; the others get an
// empty vector). The parts must cover the model of `total` parameters exactly once.
std::vector<float> assemble_on_rank0(const ModelPart& mine, size_t total, RankGroup& ranks);
