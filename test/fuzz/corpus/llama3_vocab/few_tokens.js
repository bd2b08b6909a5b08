const llama_vocab_base64 = "YQpiCmFiCsSgCsSK";
const llama_merges_binary = "AACAAEA=";
