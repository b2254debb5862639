// The global gradient norm of a step, for clipping and train.nan_check: read by the host
// before the update, or (train.grad_norm_on_device) kept on the device, where the optimizer
// clips with it (loom.opt-clip/1), and read by the host once the update is enqueued.
#pragma once

#include "train/train_run.hpp"

namespace loom::engine {

// The squared global gradient norm: each gradient counted once, summed over the ranks that
// hold different ones (expert gradients over the expert group too). COLLECTIVE over the
// world; reads the device.
double squared_grad_norm(TrainRun& r);

// The same into r.device_sums' first two (dense, expert) on the device, the same sums over
// the same ranks in the same order, and the read of r.device_sums started (the handle for
// finish_device_norm). `poison`: this rank's host part of a loss is not finite, so the norm
// is made NaN before the ranks sum it, and every rank's optimizer leaves the step alone.
// COLLECTIVE over the world; enqueues.
void* start_device_norm(TrainRun& r, bool poison);
// Its two parts: the sums on the device (enqueued), and the read of r.device_sums started.
void sum_device_norm(TrainRun& r, bool poison);
void* start_device_read(TrainRun& r);

// The squared norm of a started read: waits for that read alone (the update after it runs on).
// `losses` (r.loss_terms of them, or NULL): the loss terms' sums the model kept on the device.
double finish_device_norm(TrainRun& r, void* read, double* losses = nullptr);

}  // namespace loom::engine
