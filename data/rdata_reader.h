// Reads the character vectors stored in an R lazy-load database (a package's data/Rdata.rdb), without
// R. The file is a sequence of records; each is a 4-byte big-endian length (of the uncompressed
// record) followed by a zlib stream holding one R object serialised in XDR format ("X\n", then
// big-endian integers). A character vector serialises as its type (STRSXP) and length, then per
// element a CHARSXP: flags, byte length (-1 for NA) and the bytes.
#pragma once
#include <string>
#include <vector>

// Every character vector in the file, in file order, as UTF-8 strings (NA elements are left out;
// Latin-1 elements are converted). Records holding other kinds of objects are passed over. A file
// that is not a well-formed database throws InputError naming the file, the record and the problem.
std::vector<std::vector<std::string>> read_rdata_character_vectors(const std::string& path);
