// Spotting a loss or gradient norm far outside its recent range (llm.c's -sl / -sg): the z-score of
// each new value against a window of the last 128 values, the new one included. Until the window
// is full, update() returns NaN (no verdict). The trainers skip the parameter update of a step
// whose z-score exceeds the flag's threshold. The struct is plain data so a checkpoint saves it as
// is.
#pragma once

struct OutlierDetector {
    static constexpr int WINDOW = 128;
    double values[WINDOW] = {0};
    int count = 0;  // values seen, up to WINDOW
    int next = 0;   // slot the next value replaces once the window is full

    // Adds x and returns its z-score (x - mean) / std over the window (0 if all values are equal).
    double update(double x);
};
