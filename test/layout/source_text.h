// C++ and CUDA source text as the floor-plan checks read it (test/layout/floor_plan.h): the code with
// comments and literals blanked out, its #include lines, and where its function definitions begin
// and end. A reader of this codebase's style, not a compiler: it knows no macros and follows every
// branch of an #if.
#pragma once
#include <string>
#include <vector>

namespace layout {

// The text with every comment, string literal and character literal replaced by spaces (newlines
// kept, so line numbers still match); with blank_preprocessor, each preprocessor line too
// (continuation lines included). What remains is what braces and identifiers mean to the compiler.
std::string code_only(const std::string& text, bool blank_preprocessor);

struct IncludeLine {
    int line;            // 1-based
    std::string target;  // as written between the quotes or angle brackets
    bool angled;         // <...>: a system header
};
std::vector<IncludeLine> include_lines(const std::string& text);

// One function definition: its name as written (Class::name where qualified), and the lines of the
// opening and closing braces of its body.
struct FunctionSpan {
    std::string name;
    int open_line, close_line;
    bool device;  // marked __global__ or __device__: a kernel or code it calls on the GPU
    int lines() const { return close_line - open_line + 1; }
};
struct FunctionScan {
    std::vector<FunctionSpan> functions;
    std::string error;  // set when the braces do not pair up (then the spans are not to be trusted)
};
// The functions defined at namespace or class scope; a lambda or local class inside a function is
// part of that function.
FunctionScan function_spans(const std::string& text);

}  // namespace layout
