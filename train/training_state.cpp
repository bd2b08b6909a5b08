// The training-state file (see training_state.h).
#include "train/training_state.h"

#include <cstring>
#include <type_traits>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/model_descriptor.h"

static_assert(std::is_trivially_copyable<OutlierDetector>::value, "saved byte for byte");
static const char STATE_MAGIC[8] = {'G', 'P', 'T', 'S', 'T', 'A', 'T', 'E'};
constexpr size_t STATE_HEADER_BYTES = 32;

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < bytes; i++) hash = (hash ^ p[i]) * 0x100000001B3ull;
    return hash;
}

// The fixed-size start of the payload as a list of byte ranges, in file order, shared by writer and
// reader. Version 1 ended it with a `sharded` flag (always 0 in the files read here) where version 2
// has the mesh.
struct Piece {
    void* data;
    size_t bytes;
};
struct MeshFields {
    int32_t data_ranks, tensor_parallel, pipeline_parallel, reserved;
};
static std::vector<Piece> fixed_pieces(TrainingState& s, uint32_t version, MeshFields* mesh,
                                       int64_t* v1_sharded) {
    RunShape& r = s.shape;
    GPTConfig& c = r.config;
    std::vector<Piece> pieces = {{&c.max_seq_len, 4},
                                 {&c.vocab_size, 4},
                                 {&c.padded_vocab_size, 4},
                                 {&c.num_layers, 4},
                                 {&c.num_heads, 4},
                                 {&c.channels, 4},
                                 {&r.batch_size, 4},
                                 {&r.seq_len, 4},
                                 {&r.total_batch, 8},
                                 {&r.num_ranks, 4},
                                 {&r.shuffle, 4},
                                 {&r.data_seed, 8},
                                 {&s.rank, 4},
                                 {&s.step, 8},
                                 {&s.loader.epoch, 8},
                                 {&s.loader.shard_step, 8},
                                 {&s.loader.chunk_step, 8},
                                 {&s.sample_rng_state, 8},
                                 {&s.loss_detector, sizeof(OutlierDetector)},
                                 {&s.norm_detector, sizeof(OutlierDetector)}};
    if (version == 1)
        pieces.push_back({v1_sharded, 8});
    else
        pieces.push_back({mesh, sizeof *mesh});
    return pieces;
}
static size_t fixed_bytes(uint32_t version) {
    TrainingState probe;
    MeshFields mesh;
    int64_t sharded;
    size_t n = 0;
    for (const Piece& p : fixed_pieces(probe, version, &mesh, &sharded)) n += p.bytes;
    return n;
}

void write_training_state(const std::string& path, const TrainingState& state) {
    TrainingState& s = const_cast<TrainingState&>(state);  // pieces only read from here
    if (ranges_size(s.ranges) != s.params.size() || s.params.size() != s.adam_m.size() ||
        s.params.size() != s.adam_v.size())
        fail("internal error: a training state's ranges list %zu elements, its arrays hold %zu, %zu, %zu",
             ranges_size(s.ranges), s.params.size(), s.adam_m.size(), s.adam_v.size());
    MeshFields mesh = {s.data_ranks, s.tensor_parallel, s.pipeline_parallel, 0};
    uint64_t range_count = s.ranges.size();
    uint64_t lengths[3] = {s.params.size(), s.adam_m.size(), s.adam_v.size()};
    std::vector<Piece> pieces = fixed_pieces(s, TRAINING_STATE_VERSION, &mesh, nullptr);
    pieces.push_back({&range_count, sizeof range_count});
    pieces.push_back({s.ranges.data(), s.ranges.size() * sizeof(LayoutRange)});
    pieces.push_back({lengths, sizeof lengths});
    pieces.push_back({s.params.data(), s.params.size() * 4});
    pieces.push_back({s.adam_m.data(), s.adam_m.size() * 4});
    pieces.push_back({s.adam_v.data(), s.adam_v.size() * 4});
    uint64_t payload_bytes = 0, checksum = FNV_OFFSET;
    for (const Piece& p : pieces) {
        payload_bytes += p.bytes;
        checksum = fnv1a64(p.data, p.bytes, checksum);
    }
    uint32_t version[2] = {TRAINING_STATE_VERSION, 0};
    AtomicFile file(path);
    file.write(STATE_MAGIC, 8);
    file.write(version, 8);
    file.write(&payload_bytes, 8);
    file.write(&checksum, 8);
    for (const Piece& p : pieces) file.write(p.data, p.bytes);
    file.commit();
}

// Reads a u64 at `at` of the payload, advancing it; fails when the payload ends first.
static uint64_t read_u64(const std::vector<unsigned char>& payload, size_t* at, const std::string& path) {
    if (payload.size() - *at < 8) fail("%s: ends inside its header fields (truncated?)", path.c_str());
    uint64_t value;
    memcpy(&value, payload.data() + *at, 8);
    *at += 8;
    return value;
}

// Reads the header and the payload it announces, checking magic, version, size and checksum in that
// order; sets *version.
static std::vector<unsigned char> read_checked_payload(const std::string& path, uint32_t* version) {
    const uint64_t size = file_size(path);
    if (size < STATE_HEADER_BYTES) fail("%s: too short to be a training state", path.c_str());
    unsigned char header[STATE_HEADER_BYTES];
    read_bytes(path, 0, header, STATE_HEADER_BYTES);
    uint64_t payload_bytes, checksum;
    memcpy(version, header + 8, 4);
    memcpy(&payload_bytes, header + 16, 8);
    memcpy(&checksum, header + 24, 8);
    if (memcmp(header, STATE_MAGIC, 8) != 0) fail("%s: not a training state file", path.c_str());
    if (*version != 1 && *version != TRAINING_STATE_VERSION)
        fail("%s: training state version %u, this build reads versions 1 and %u", path.c_str(), *version,
             TRAINING_STATE_VERSION);
    if (payload_bytes != size - STATE_HEADER_BYTES || payload_bytes < fixed_bytes(*version))
        fail("%s: size %llu does not match its header (truncated?)", path.c_str(),
             (unsigned long long)size);
    std::vector<unsigned char> payload(payload_bytes);
    read_bytes(path, STATE_HEADER_BYTES, payload.data(), payload_bytes);
    if (fnv1a64(payload.data(), payload_bytes, FNV_OFFSET) != checksum)
        fail("%s: checksum mismatch (the file is corrupted)", path.c_str());
    return payload;
}

// Unpacks a checked payload in file order: the fixed fields, the mesh (version 2) or the sharded
// flag (version 1), the ranges (version 2) and the three arrays, failing where a count or length
// does not fit the bytes left. A version 1 state's ranges are left to check_ranges.
static TrainingState unpack_payload(const std::vector<unsigned char>& payload, uint32_t version,
                                    const std::string& path) {
    const uint64_t payload_bytes = payload.size();
    TrainingState s;
    MeshFields mesh = {0, 0, 0, 0};
    int64_t v1_sharded = 0;
    size_t at = 0;
    for (const Piece& p : fixed_pieces(s, version, &mesh, &v1_sharded)) {
        memcpy(p.data, payload.data() + at, p.bytes);
        at += p.bytes;
    }
    if (version == 1) {
        if (v1_sharded != 0)
            fail("%s: a ZeRO shard in the version 1 format, which this build cannot put back together; "
                 "resume it with the build that wrote it", path.c_str());
        mesh = {s.shape.num_ranks, 1, 1, 0};
    } else {
        const uint64_t count = read_u64(payload, &at, path);
        if (count > (payload_bytes - at) / sizeof(LayoutRange))
            fail("%s: %llu ranges do not fit in the file", path.c_str(), (unsigned long long)count);
        s.ranges.resize(count);
        if (count) memcpy(s.ranges.data(), payload.data() + at, count * sizeof(LayoutRange));
        at += count * sizeof(LayoutRange);
    }
    s.data_ranks = mesh.data_ranks, s.tensor_parallel = mesh.tensor_parallel;
    s.pipeline_parallel = mesh.pipeline_parallel;
    uint64_t lengths[3];
    for (uint64_t& length : lengths) length = read_u64(payload, &at, path);
    // Compared one by one: a sum of three corrupt lengths could wrap around to the right total.
    const uint64_t floats = (payload_bytes - at) / 4;
    if ((payload_bytes - at) % 4 || lengths[0] > floats || lengths[1] > floats - lengths[0] ||
        lengths[2] != floats - lengths[0] - lengths[1])
        fail("%s: array lengths do not match the file size", path.c_str());
    std::vector<float>* arrays[3] = {&s.params, &s.adam_m, &s.adam_v};
    for (int i = 0; i < 3; i++) {
        arrays[i]->resize(lengths[i]);
        if (lengths[i]) memcpy(arrays[i]->data(), payload.data() + at, lengths[i] * 4);
        at += lengths[i] * 4;
    }
    return s;
}

// The run's fields: a valid config, a plausible shape, rank, step and mesh, outlier windows in
// range, and three arrays of one length.
static void check_run_fields(const TrainingState& s, const std::string& path) {
    validate_config(s.shape.config, path + " config");
    const RunShape& r = s.shape;
    if (r.batch_size <= 0 || r.seq_len <= 0 || r.total_batch <= 0 || r.num_ranks <= 0 ||
        s.rank < 0 || s.rank >= r.num_ranks || s.step < 0 || s.data_ranks <= 0 ||
        s.tensor_parallel <= 0 || s.pipeline_parallel <= 0 ||
        (long long)s.data_ranks * s.tensor_parallel * s.pipeline_parallel != r.num_ranks)
        fail("%s: implausible run state (B %d, T %d, -d %lld, rank %d of %d, step %lld, mesh %d x %d x "
             "%d)", path.c_str(), r.batch_size, r.seq_len, (long long)r.total_batch, s.rank, r.num_ranks,
             (long long)s.step, s.data_ranks, s.pipeline_parallel, s.tensor_parallel);
    for (const OutlierDetector* d : {&s.loss_detector, &s.norm_detector})
        if (d->count < 0 || d->count > OutlierDetector::WINDOW || d->next < 0 ||
            d->next >= OutlierDetector::WINDOW)
            fail("%s: outlier window out of range (count %d, next %d; window %d)", path.c_str(),
                 d->count, d->next, OutlierDetector::WINDOW);
    if (s.params.size() != s.adam_m.size() || s.params.size() != s.adam_v.size())
        fail("%s: master weights and AdamW moments differ in length", path.c_str());
}

// The ranges: a version 1 state holds the whole model (its ranges are set here); each range lies
// inside the model, and together they list exactly the parameters the state holds.
static void check_ranges(TrainingState& s, uint32_t version, const std::string& path) {
    const size_t total = param_layout(s.shape.config).total;
    if (version == 1) {
        if (s.params.size() != total)
            fail("%s: holds %zu parameters, its config (%s) has %zu", path.c_str(), s.params.size(),
                 describe_config(s.shape.config).c_str(), total);
        s.ranges = whole_model_ranges(total);
    }
    uint64_t listed = 0;  // stops growing past the array's length, so it cannot wrap around
    for (const LayoutRange& range : s.ranges) {
        if (range.offset > total || range.length > total - range.offset)
            fail("%s: a range [%llu, +%llu) lies outside the model's %zu parameters", path.c_str(),
                 (unsigned long long)range.offset, (unsigned long long)range.length, total);
        if (listed <= s.params.size()) listed += range.length;
    }
    if (listed != s.params.size())
        fail("%s: its ranges do not list the %zu parameters it holds", path.c_str(), s.params.size());
}

TrainingState read_training_state(const std::string& path) {
    uint32_t version;
    const std::vector<unsigned char> payload = read_checked_payload(path, &version);
    TrainingState s = unpack_payload(payload, version, path);
    check_run_fields(s, path);
    check_ranges(s, version, path);
    return s;
}

void check_same_run(const RunShape& saved, const RunShape& now, const std::string& path) {
    const GPTConfig &a = saved.config, &b = now.config;
    if (a.max_seq_len != b.max_seq_len || a.vocab_size != b.vocab_size ||
        a.padded_vocab_size != b.padded_vocab_size || a.num_layers != b.num_layers ||
        a.num_heads != b.num_heads || a.channels != b.channels)
        fail("%s: saved model %s differs from this run's %s", path.c_str(),
             describe_config(a).c_str(), describe_config(b).c_str());
    // Not compared: -d (a different total batch only changes the accumulation; train/run_folder.cpp
    // asks for --accept-changes) and the number of ranks (the run re-shards on resume).
    struct Field {
        const char* flag;
        long long saved, now;
    };
    const Field fields[] = {
        {"-b (batch size)", saved.batch_size, now.batch_size},
        {"-t (sequence length)", saved.seq_len, now.seq_len},
        {"--shuffle", saved.shuffle, now.shuffle},
        {"--seed", (long long)saved.data_seed, (long long)now.data_seed},
    };
    for (const Field& f : fields)
        if (f.saved != f.now)
            fail("%s: saved with %s = %lld, this run has %lld", path.c_str(), f.flag, f.saved,
                 f.now);
}
