const llama_vocab_base64 = "YW=J";
const llama_merges_binary = "";
