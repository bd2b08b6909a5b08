// The training-state file (see training_state.h).
#include "train/training_state.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "base/errors.h"
#include "base/file_io.h"
#include "base/host_arrays.h"
#include "base/llama_descriptor.h"
#include "base/model_descriptor.h"
#include "base/xxhash64.h"
#include "parallel/plan/compression_cost.h"

static_assert(std::is_trivially_copyable<OutlierDetector>::value, "saved byte for byte");
static_assert((int)GradCompression::NONE == 0 && (int)GradCompression::POWERSGD == 1 &&
                  (int)GradCompression::INT8 == 2 && (int)GradCompression::SIGN == 3,
              "the compression method's number is saved");
static const char STATE_MAGIC[8] = {'G', 'P', 'T', 'S', 'T', 'A', 'T', 'E'};
constexpr size_t STATE_HEADER_BYTES = 32;

uint64_t fnv1a64(const void* data, size_t bytes, uint64_t hash) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < bytes; i++) hash = (hash ^ p[i]) * 0x100000001B3ull;
    return hash;
}

// The payload's checksum by its version's rule (FNV-1a 64 up to version 4, XXH64 from 5), as the
// payload goes by in pieces.
class PayloadChecksum {
public:
    explicit PayloadChecksum(uint32_t version) : fnv_(version <= 4) {}
    void add(const void* data, size_t bytes) {
        if (fnv_)
            fnv_hash_ = fnv1a64(data, bytes, fnv_hash_);
        else
            xxh_.update(data, bytes);
    }
    uint64_t value() const { return fnv_ ? fnv_hash_ : xxh_.digest(); }

private:
    bool fnv_;
    uint64_t fnv_hash_ = FNV_OFFSET;
    Xxh64 xxh_;
};

uint64_t training_state_checksum(uint32_t version, const void* payload, size_t bytes) {
    PayloadChecksum checksum(version);
    checksum.add(payload, bytes);
    return checksum.value();
}

// The fixed-size start of the payload as a list of byte ranges, in file order, shared by writer and
// reader. Version 1 ended it with a `sharded` flag (always 0 in the files read here) where version 2
// has the mesh and the optimizer (a field that was reserved, and written as 0, before LAMB and LARS).
// Version 4 adds the model's family after them, with Llama 3's own shape (zeros for GPT-2). The six
// shape slots before them are GPT-2's config (maxT, V, Vp, L, NH, C); a Llama 3 state holds maxT,
// V, V, L, H, C there.
struct Piece {
    void* data;
    size_t bytes;
};
struct MeshFields {
    int32_t data_ranks, tensor_parallel, pipeline_parallel, optimizer;
};
struct FamilyFields {
    int32_t family, kv_heads, ffn_channels, scaling_on, scaling_original_max, unused;
    double rope_theta, rmsnorm_eps, scaling_factor, scaling_low_freq, scaling_high_freq;
};
static_assert(sizeof(FamilyFields) == 64, "saved byte for byte");

// The shape slots and the family fields of a config, and the config of read ones.
static GPTConfig shape_slots(const ModelConfig& m) {
    if (is_gpt2(m)) return m.gpt;
    const LlamaConfig& c = m.llama;
    GPTConfig slots;
    slots.max_seq_len = c.max_seq_len, slots.vocab_size = c.vocab_size, slots.padded_vocab_size = c.vocab_size;
    slots.num_layers = c.num_layers, slots.num_heads = c.num_heads, slots.channels = c.channels;
    return slots;
}
static FamilyFields family_fields(const ModelConfig& m) {
    FamilyFields f = {};
    if (is_gpt2(m)) return f;
    const LlamaConfig& c = m.llama;
    f.family = (int32_t)ModelFamily::LLAMA3;
    f.kv_heads = c.num_kv_heads, f.ffn_channels = c.ffn_channels;
    f.scaling_on = c.rope_scaling.enabled ? 1 : 0, f.scaling_original_max = c.rope_scaling.original_max_position;
    f.rope_theta = c.rope_theta, f.rmsnorm_eps = c.rmsnorm_eps;
    f.scaling_factor = c.rope_scaling.factor, f.scaling_low_freq = c.rope_scaling.low_freq_factor;
    f.scaling_high_freq = c.rope_scaling.high_freq_factor;
    return f;
}
static ModelConfig model_of_fields(const GPTConfig& slots, const FamilyFields& f, const std::string& path) {
    if (f.family == (int32_t)ModelFamily::GPT2) return gpt2_model(slots);
    if (f.family != (int32_t)ModelFamily::LLAMA3 || (f.scaling_on != 0 && f.scaling_on != 1))
        fail("%s: unknown model family %d (0 GPT-2, 1 Llama 3) or RoPE scaling flag %d", path.c_str(), f.family,
             f.scaling_on);
    LlamaConfig c;
    c.max_seq_len = slots.max_seq_len, c.vocab_size = slots.vocab_size, c.num_layers = slots.num_layers;
    c.num_heads = slots.num_heads, c.channels = slots.channels;
    c.num_kv_heads = f.kv_heads, c.ffn_channels = f.ffn_channels;
    c.rope_theta = f.rope_theta, c.rmsnorm_eps = f.rmsnorm_eps;
    c.rope_scaling.enabled = f.scaling_on == 1, c.rope_scaling.original_max_position = f.scaling_original_max;
    c.rope_scaling.factor = f.scaling_factor, c.rope_scaling.low_freq_factor = f.scaling_low_freq;
    c.rope_scaling.high_freq_factor = f.scaling_high_freq;
    return llama3_model(c);
}

static std::vector<Piece> fixed_pieces(TrainingState& s, uint32_t version, GPTConfig* slots, MeshFields* mesh,
                                       FamilyFields* family, int64_t* v1_sharded) {
    RunShape& r = s.shape;
    GPTConfig& c = *slots;
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
    if (version >= 4) pieces.push_back({family, sizeof *family});
    return pieces;
}
static size_t fixed_bytes(uint32_t version) {
    TrainingState probe;
    GPTConfig slots;
    MeshFields mesh;
    FamilyFields family;
    int64_t sharded;
    size_t n = 0;
    for (const Piece& p : fixed_pieces(probe, version, &slots, &mesh, &family, &sharded)) n += p.bytes;
    return n;
}

// The file's bytes as pieces (pointers into the state and into `scratch`, which holds the small
// fields): the 32-byte header first, then the payload.
struct StateScratch {
    GPTConfig slots;
    MeshFields mesh;
    FamilyFields family;
    uint64_t range_count, compression_count, lengths[3], payload_bytes, checksum;
    int32_t compression_fields[2];
    uint32_t version[2];
};
static std::vector<Piece> state_file_pieces(const TrainingState& state, StateScratch* k) {
    TrainingState& s = const_cast<TrainingState&>(state);  // pieces only read from here
    if (ranges_size(s.ranges) != s.params.size() || s.params.size() != s.adam_m.size() ||
        s.params.size() != s.adam_v.size())
        fail("internal error: a training state's ranges list %zu elements, its arrays hold %zu, %zu, %zu",
             ranges_size(s.ranges), s.params.size(), s.adam_m.size(), s.adam_v.size());
    k->slots = shape_slots(s.shape.config);
    k->family = family_fields(s.shape.config);
    k->mesh = {s.data_ranks, s.tensor_parallel, s.pipeline_parallel, (int32_t)s.optimizer};
    k->range_count = s.ranges.size();
    k->compression_fields[0] = s.compression.method, k->compression_fields[1] = s.compression.data_ranks;
    k->compression_count = s.compression.values.size();
    k->lengths[0] = s.params.size(), k->lengths[1] = s.adam_m.size(), k->lengths[2] = s.adam_v.size();
    std::vector<Piece> payload = fixed_pieces(s, TRAINING_STATE_VERSION, &k->slots, &k->mesh, &k->family, nullptr);
    payload.push_back({&k->range_count, sizeof k->range_count});
    payload.push_back({s.ranges.data(), s.ranges.size() * sizeof(LayoutRange)});
    payload.push_back({k->compression_fields, sizeof k->compression_fields});
    payload.push_back({&s.compression.layout, sizeof s.compression.layout});
    payload.push_back({&k->compression_count, sizeof k->compression_count});
    payload.push_back({s.compression.values.data(), s.compression.values.size() * 4});
    payload.push_back({k->lengths, sizeof k->lengths});
    payload.push_back({s.params.data(), s.params.size() * 4});
    payload.push_back({s.adam_m.data(), s.adam_m.size() * 4});
    payload.push_back({s.adam_v.data(), s.adam_v.size() * 4});
    k->payload_bytes = 0;
    PayloadChecksum checksum(TRAINING_STATE_VERSION);
    for (const Piece& p : payload) {
        k->payload_bytes += p.bytes;
        checksum.add(p.data, p.bytes);
    }
    k->checksum = checksum.value();
    k->version[0] = TRAINING_STATE_VERSION, k->version[1] = 0;
    std::vector<Piece> pieces = {{(void*)STATE_MAGIC, 8}, {k->version, 8}, {&k->payload_bytes, 8}, {&k->checksum, 8}};
    pieces.insert(pieces.end(), payload.begin(), payload.end());
    return pieces;
}

std::vector<char> training_state_image(const TrainingState& state) {
    StateScratch scratch;
    const std::vector<Piece> pieces = state_file_pieces(state, &scratch);
    size_t bytes = 0;
    for (const Piece& p : pieces) bytes += p.bytes;
    std::vector<char> image = reusable_host_bytes(bytes);  // every byte written (base/host_arrays.h)
    size_t at = 0;
    for (const Piece& p : pieces) {
        if (p.bytes) memcpy(image.data() + at, p.data, p.bytes);
        at += p.bytes;
    }
    return image;
}

void write_training_state(const std::string& path, const TrainingState& state) {
    StateScratch scratch;
    const std::vector<Piece> pieces = state_file_pieces(state, &scratch);
    AtomicFile file(path);
    for (const Piece& p : pieces) file.write(p.data, p.bytes);
    file.commit();
}

// The payload's checksum, streamed through a buffer of at most CHECKSUM_BLOCK bytes.
constexpr uint64_t CHECKSUM_BLOCK = 1 << 20;
static uint64_t payload_checksum(FileReader& file, uint32_t version, uint64_t payload_bytes) {
    std::vector<unsigned char> block(std::min(payload_bytes, CHECKSUM_BLOCK));
    PayloadChecksum checksum(version);
    for (uint64_t done = 0; done < payload_bytes;) {
        const size_t n = (size_t)std::min<uint64_t>(block.size(), payload_bytes - done);
        file.read(STATE_HEADER_BYTES + done, block.data(), n);
        checksum.add(block.data(), n);
        done += n;
    }
    return checksum.value();
}

// Checks the header and the payload it announces: magic, version, size and checksum in that order;
// sets *version and *payload_bytes.
static void check_header_and_checksum(FileReader& file, uint32_t* version, uint64_t* payload_bytes) {
    const std::string& path = file.path();
    const uint64_t size = file.size();
    if (size < STATE_HEADER_BYTES) fail("%s: too short to be a training state", path.c_str());
    unsigned char header[STATE_HEADER_BYTES];
    file.read(0, header, STATE_HEADER_BYTES);
    uint64_t checksum;
    memcpy(version, header + 8, 4);
    memcpy(payload_bytes, header + 16, 8);
    memcpy(&checksum, header + 24, 8);
    if (memcmp(header, STATE_MAGIC, 8) != 0) fail("%s: not a training state file", path.c_str());
    if (*version < 1 || *version > TRAINING_STATE_VERSION)
        fail("%s: training state version %u, this build reads versions 1 to %u", path.c_str(), *version,
             TRAINING_STATE_VERSION);
    if (*payload_bytes != size - STATE_HEADER_BYTES || *payload_bytes < fixed_bytes(*version))
        fail("%s: size %llu does not match its header (truncated?)", path.c_str(), (unsigned long long)size);
    if (payload_checksum(file, *version, *payload_bytes) != checksum)
        fail("%s: checksum mismatch (the file is corrupted)", path.c_str());
}

// Reads the payload's fields in file order, failing where one runs past the payload's end.
struct PayloadCursor {
    FileReader& file;
    uint64_t at, end;  // file offsets
    void read(void* out, uint64_t bytes) {
        if (end - at < bytes) fail("%s: ends inside its header fields (truncated?)", file.path().c_str());
        file.read(at, out, bytes);
        at += bytes;
    }
    uint64_t u64() {
        uint64_t value;
        read(&value, 8);
        return value;
    }
};

// Reads a checked payload's fields in file order: the fixed fields, the mesh (version 2 on) or the
// sharded flag (version 1), the ranges (version 2 on), the compression state but its values (version
// 3; *compression_at and *compression_count say where they are) and the three arrays' lengths,
// failing where a count or length does not fit the bytes left; leaves the cursor at the first array.
// A version 1 state's ranges are left to check_ranges.
static TrainingState read_fields(PayloadCursor& in, uint32_t version, uint64_t lengths[3],
                                 uint64_t* compression_at, uint64_t* compression_count) {
    const std::string& path = in.file.path();
    TrainingState s;
    GPTConfig slots;
    MeshFields mesh = {0, 0, 0, 0};
    FamilyFields family = {};  // GPT-2's before version 4
    int64_t v1_sharded = 0;
    for (const Piece& p : fixed_pieces(s, version, &slots, &mesh, &family, &v1_sharded)) in.read(p.data, p.bytes);
    s.shape.config = model_of_fields(slots, family, path);
    if (version == 1) {
        if (v1_sharded != 0)
            fail("%s: a ZeRO shard in the version 1 format, which this build cannot put back together; "
                 "resume it with the build that wrote it", path.c_str());
        mesh = {s.shape.num_ranks, 1, 1, 0};
    } else {
        const uint64_t count = in.u64();
        if (count > (in.end - in.at) / sizeof(LayoutRange))
            fail("%s: %llu ranges do not fit in the file", path.c_str(), (unsigned long long)count);
        s.ranges.resize(count);
        in.read(s.ranges.data(), count * sizeof(LayoutRange));
    }
    *compression_at = in.at, *compression_count = 0;
    if (version >= 3) {
        int32_t fields[2];
        in.read(fields, sizeof fields);
        s.compression.method = fields[0], s.compression.data_ranks = fields[1];
        s.compression.layout = in.u64();
        *compression_count = in.u64();
        if (*compression_count > (in.end - in.at) / 4)
            fail("%s: %llu compression values do not fit in the file", path.c_str(),
                 (unsigned long long)*compression_count);
        *compression_at = in.at;
        in.at += *compression_count * 4;
        if (s.compression.method < 0 || s.compression.method > 3 || s.compression.data_ranks < 0 ||
            (s.compression.method == 0) != (*compression_count == 0))
            fail("%s: implausible gradient compression state (method %d, %d data ranks, %llu values)",
                 path.c_str(), s.compression.method, s.compression.data_ranks,
                 (unsigned long long)*compression_count);
    }
    s.data_ranks = mesh.data_ranks, s.tensor_parallel = mesh.tensor_parallel;
    s.pipeline_parallel = mesh.pipeline_parallel;
    if (mesh.optimizer < 0 || mesh.optimizer >= kOptimizerKinds)
        fail("%s: unknown optimizer %d (0 adamw, 1 lamb, 2 lars, 3 muon)", path.c_str(), mesh.optimizer);
    s.optimizer = (OptimizerKind)mesh.optimizer;
    for (int i = 0; i < 3; i++) lengths[i] = in.u64();
    // Compared one by one: a sum of three corrupt lengths could wrap around to the right total.
    const uint64_t floats = (in.end - in.at) / 4;
    if ((in.end - in.at) % 4 || lengths[0] > floats || lengths[1] > floats - lengths[0] ||
        lengths[2] != floats - lengths[0] - lengths[1])
        fail("%s: array lengths do not match the file size", path.c_str());
    return s;
}

// The run's fields: a valid config, a plausible shape, rank, step and mesh, outlier windows in
// range, and three arrays of one length.
static void check_run_fields(const TrainingState& s, const uint64_t lengths[3], const std::string& path) {
    if (is_llama3(s.shape.config))
        validate_llama_config(s.shape.config.llama, path + " config");
    else
        validate_config(s.shape.config.gpt, path + " config");
    const RunShape& r = s.shape;
    if (r.batch_size <= 0 || r.seq_len <= 0 || r.total_batch <= 0 || r.num_ranks <= 0 ||
        s.rank < 0 || s.rank >= r.num_ranks || s.step < 0 || s.data_ranks <= 0 ||
        s.tensor_parallel <= 0 || s.pipeline_parallel <= 0 ||
        (long long)s.data_ranks * s.tensor_parallel > r.num_ranks ||  // first, so the product below fits
        (long long)s.data_ranks * s.tensor_parallel * s.pipeline_parallel != r.num_ranks)
        fail("%s: implausible run state (B %d, T %d, -d %lld, rank %d of %d, step %lld, mesh %d x %d x "
             "%d)", path.c_str(), r.batch_size, r.seq_len, (long long)r.total_batch, s.rank, r.num_ranks,
             (long long)s.step, s.data_ranks, s.pipeline_parallel, s.tensor_parallel);
    for (const OutlierDetector* d : {&s.loss_detector, &s.norm_detector})
        if (d->count < 0 || d->count > OutlierDetector::WINDOW || d->next < 0 ||
            d->next >= OutlierDetector::WINDOW)
            fail("%s: outlier window out of range (count %d, next %d; window %d)", path.c_str(),
                 d->count, d->next, OutlierDetector::WINDOW);
    if (lengths[0] != lengths[1] || lengths[0] != lengths[2])
        fail("%s: master weights and optimizer moments differ in length", path.c_str());
}

// The ranges: a version 1 state holds the whole model (its ranges are set here); each range lies
// inside the model, and together they list exactly the `values` parameters the state holds.
static void check_ranges(TrainingState& s, uint64_t values, uint32_t version, const std::string& path) {
    const size_t total = parameter_count(s.shape.config);
    if (version == 1) {
        if (values != total)
            fail("%s: holds %llu parameters, its config (%s) has %zu", path.c_str(), (unsigned long long)values,
                 describe_model(s.shape.config).c_str(), total);
        s.ranges = whole_model_ranges(total);
    }
    uint64_t listed = 0;  // stops growing past the array's length, so it cannot wrap around
    for (const LayoutRange& range : s.ranges) {
        if (range.offset > total || range.length > total - range.offset)
            fail("%s: a range [%llu, +%llu) lies outside the model's %zu parameters", path.c_str(),
                 (unsigned long long)range.offset, (unsigned long long)range.length, total);
        if (listed <= values) listed += range.length;
    }
    if (listed != values)
        fail("%s: its ranges do not list the %llu parameters it holds", path.c_str(), (unsigned long long)values);
}

TrainingStateFile open_training_state(const std::string& path) {
    FileReader file(path);
    uint32_t version;
    uint64_t payload_bytes, lengths[3], compression_at, compression_count;
    check_header_and_checksum(file, &version, &payload_bytes);
    PayloadCursor in{file, STATE_HEADER_BYTES, file.size()};
    TrainingState s = read_fields(in, version, lengths, &compression_at, &compression_count);
    check_run_fields(s, lengths, path);
    check_ranges(s, lengths[0], version, path);
    const uint64_t arrays_at = in.at;
    return TrainingStateFile(std::move(s), lengths[0], std::move(file), arrays_at, compression_at,
                             compression_count);
}

int state_file_rank_count(const std::string& path) {
    try {
        FileReader file(path);
        if (file.size() < STATE_HEADER_BYTES) return 0;
        unsigned char header[STATE_HEADER_BYTES];
        file.read(0, header, STATE_HEADER_BYTES);
        uint32_t version;
        memcpy(&version, header + 8, 4);
        if (memcmp(header, STATE_MAGIC, 8) != 0 || version < 1 || version > TRAINING_STATE_VERSION) return 0;
        PayloadCursor in{file, STATE_HEADER_BYTES, file.size()};
        TrainingState s;
        GPTConfig slots;
        MeshFields mesh;
        FamilyFields family;
        int64_t v1_sharded;
        for (const Piece& p : fixed_pieces(s, version, &slots, &mesh, &family, &v1_sharded)) in.read(p.data, p.bytes);
        return std::max(s.shape.num_ranks, 0);
    } catch (const InputError&) { return 0; }
}

CompressionState TrainingStateFile::read_compression() {
    CompressionState c = state_.compression;
    c.values.resize(compression_values_);
    file_.read(compression_at_, c.values.data(), compression_values_ * 4);
    return c;
}

void TrainingStateFile::read_values(int array, uint64_t first, uint64_t count, float* out) {
    if (array < 0 || array > 2 || first > values_ || count > values_ - first)
        fail("internal error: values [%llu, +%llu) of array %d of %s, which holds %llu", (unsigned long long)first,
             (unsigned long long)count, array, file_.path().c_str(), (unsigned long long)values_);
    file_.read(arrays_at_ + ((uint64_t)array * values_ + first) * 4, out, count * 4);
}

TrainingState read_training_state(const std::string& path) {
    TrainingStateFile file = open_training_state(path);
    TrainingState s = file.state();
    std::vector<float>* arrays[3] = {&s.params, &s.adam_m, &s.adam_v};
    for (int i = 0; i < 3; i++) {
        arrays[i]->resize(file.values());
        file.read_values(i, 0, file.values(), arrays[i]->data());
    }
    s.compression = file.read_compression();
    return s;
}

void check_same_run(const RunShape& saved, const RunShape& now, const std::string& path) {
    const ModelConfig &a = saved.config, &b = now.config;
    if (!same_model(a, b))
        fail("%s: saved model %s differs from this run's %s", path.c_str(),
             describe_model(a).c_str(), describe_model(b).c_str());
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

void check_same_optimizer(OptimizerKind saved, OptimizerKind current, const std::string& path) {
    if (saved != current)
        fail("%s: written by --optimizer %s, this run asks for --optimizer %s: resume with --optimizer %s, or "
             "start a new run in another folder", path.c_str(), optimizer_name(saved), optimizer_name(current),
             optimizer_name(saved));
}
