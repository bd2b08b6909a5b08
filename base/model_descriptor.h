// Model shapes by name, so a run can start from random weights without a model file:
//   d12 d24 d36 d48 (and d6 d60 d72 d84)   GPT-2 by depth; same as gpt2:d12 ...
//   gpt2:dN                                GPT-2 family by depth N (maxT 1024)
//   gpt3:cN                                GPT-3 family by channels N (maxT 2048, dense attention)
//   custom:L2:C64:H4[:V512][:T64]          any shape, for tests and small runs
//                                          (L layers, C channels, H heads, V vocab, T maxT;
//                                           V defaults to GPT-2's 50257, T to 1024)
// Every form gives the padded vocabulary Vp = V rounded up to a multiple of 128.
#pragma once
#include <string>

#include "base/gpt_config.h"

// True if the text has the shape of a descriptor (as opposed to a model file path).
bool is_model_descriptor(const std::string& text);

// The config a descriptor names; throws InputError naming the descriptor if it is not valid.
GPTConfig config_from_descriptor(const std::string& descriptor);

// V rounded up to a multiple of 128.
int padded_vocab_size(int vocab_size);

// Throws InputError ("<what>: <problem>") unless the shape is usable: every size positive, heads
// dividing channels, Vp ≥ V.
void validate_config(const GPTConfig& config, const std::string& what);

// "L=12 H=12 C=768 V=50257 Vp=50304 maxT=1024", for messages and logs.
std::string describe_config(const GPTConfig& config);
