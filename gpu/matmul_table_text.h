// kernels/matmul.h's table of algorithms as the text of AlgorithmChoices (base/train_model.h), which the
// loop saves and shares (train/algorithm_table.h). One choice per configuration:
//   key    matmul m:768 n:64 k:256 op:TN accumulate:0 epilogue:1 align:256,256,256,16,256 compute:68
//          (cuBLASLt's column-major m, n, k; transposes of A and B; the cublasLtEpilogue_t; the
//          alignments of A, B, D, bias and aux in bytes; the cublasComputeType_t)
//   value  the 64-byte cublasLtMatmulAlgo_t in 128 hex digits (its eight 64-bit words in order)
#pragma once
#include <cinttypes>
#include <cstdio>
#include <string>

#include "base/errors.h"
#include "base/train_model.h"
#include "kernels/matmul.h"

inline std::string matmul_key_text(const MatmulAlgoEntry& e) {
    const MatmulAlgoKey& k = e.key;
    return strprintf("matmul m:%d n:%d k:%d op:%c%c accumulate:%d epilogue:%u align:%d,%d,%d,%d,%d compute:%d", k.m,
                     k.n, k.k, k.trans_a ? 'T' : 'N', k.trans_b ? 'T' : 'N', (int)k.accumulate, k.epilogue,
                     k.align_a, k.align_b, k.align_d, k.align_bias, k.align_aux, (int)e.compute_type);
}

inline std::string matmul_algo_text(const cublasLtMatmulAlgo_t& algo) {
    std::string text;
    for (uint64_t word : algo.data) text += strprintf("%016" PRIx64, word);
    return text;
}

inline AlgorithmChoice matmul_choice_text(const MatmulAlgoEntry& e) {
    return {matmul_key_text(e), matmul_algo_text(e.algo)};
}

// The entry a choice's text describes; false when it is not exactly what matmul_choice_text writes.
inline bool matmul_entry_from_text(const AlgorithmChoice& c, MatmulAlgoEntry* e) {
    MatmulAlgoKey& k = e->key;
    char op_a = 0, op_b = 0;
    int accumulate = 0, compute = 0;
    if (sscanf(c.key.c_str(), "matmul m:%d n:%d k:%d op:%c%c accumulate:%d epilogue:%u align:%d,%d,%d,%d,%d compute:%d",
               &k.m, &k.n, &k.k, &op_a, &op_b, &accumulate, &k.epilogue, &k.align_a, &k.align_b, &k.align_d,
               &k.align_bias, &k.align_aux, &compute) != 13)
        return false;
    k.trans_a = op_a == 'T', k.trans_b = op_b == 'T', k.accumulate = accumulate != 0;
    e->compute_type = compute;
    if (c.value.size() != 2 * sizeof(e->algo.data)) return false;
    for (size_t i = 0; i < sizeof(e->algo.data) / sizeof(e->algo.data[0]); i++) {
        const std::string word = c.value.substr(16 * i, 16);
        if (word.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
        e->algo.data[i] = strtoull(word.c_str(), nullptr, 16);
    }
    return matmul_choice_text(*e) == c;  // nothing left over, nothing read loosely
}
