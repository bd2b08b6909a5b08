// Whole-file reading for the data tools, with one-line errors that name the file.
#pragma once
#include <string>

// The bytes of a file; throws InputError if it is missing, a directory or unreadable.
std::string read_file(const std::string& path);
