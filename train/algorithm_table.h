// The table of timed choices (base/train_model.h: AlgorithmTable; on a GPU the cuBLASLt algorithm of
// each product configuration) as the run folder keeps it, and as the ranks share it.
//
// Why: on a GPU each process could pick its algorithms by timing, so two ranks, or a run and its
// resume, could compute with different ones and (where their roundings differ) different bits. So a
// run's algorithms are chosen once: during the first step every rank computes with the untimed
// defaults and times its candidates; after it, rank 0 gathers every rank's choices, keeps its own for
// a configuration several ranks met and the lowest rank's for one it did not meet (another pipeline
// stage or tensor slice), and sends the table back; every rank computes with it from then on, and
// rank 0 saves it as DIR/matmul_algorithms.txt. A later start in that folder (a resume, or a fresh run
// given the file) loads it before its first step on every rank and times only what it lacks.
//
// The file, text:
//   matmul_algorithms 1
//   environment NVIDIA H100 80GB HBM3 (132 SMs), cuBLASLt 130100, bf16 storage
//   <key> = <value>                 one line per choice
//   checksum <16 hex digits>        FNV-1a 64 of every byte before this line
// A file written for another environment is ignored (the caller notes it); one that is not such a
// file, or is damaged, is an InputError naming the file and the problem.
#pragma once
#include <string>
#include <vector>

#include "base/ranks.h"
#include "base/train_model.h"

std::string algorithm_table_path(const std::string& dir);

// The table as the file holds it, and back (parse throws InputError starting with `name`).
std::string algorithm_table_text(const AlgorithmTable& table);
AlgorithmTable parse_algorithm_table(const std::string& text, const std::string& name);
AlgorithmTable read_algorithm_table(const std::string& path);
void write_algorithm_table(const std::string& path, const AlgorithmTable& table);  // atomically

// One table from every rank's (in rank order): rank 0's choices, then, for keys rank 0 does not hold,
// the lowest rank's. `timed` counts rank 0's timed choices.
AlgorithmTable merge_algorithm_tables(const std::vector<AlgorithmTable>& by_rank);

// The merged table of every rank's `mine`, on every rank (a collective).
AlgorithmTable share_algorithm_table(const AlgorithmTable& mine, RankGroup& ranks);
