// Model FLOPs utilisation (train.cpp's step, the log and the metrics file).
#pragma once

namespace loom::engine {

// MFU of `flops_per_s` (the model's FLOPs of the whole world per second) against
// `peak_gflops` per rank; 0 when the peak is unknown (0). The peak is a sample (backend/cpu
// times one sgemm as it starts, under whatever else loads the machine then), so a step that
// ran faster proves the device can: its rate becomes the peak (the log says so), and MFU
// never reads above 100%.
double model_flops_utilisation(double flops_per_s, double& peak_gflops, int world);

}  // namespace loom::engine
