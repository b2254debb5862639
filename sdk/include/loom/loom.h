/* Loom SDK, ABI 2 — everything a plugin author includes. */
#ifndef LOOM_LOOM_H
#define LOOM_LOOM_H
#include "loom/attention.h"
#include "loom/backend.h"
#include "loom/comm.h"
#include "loom/common.h"
#include "loom/dataset.h"
#include "loom/grad.h"
#include "loom/graph.h"
#include "loom/host.h"
#include "loom/model.h"
#include "loom/optimizer.h"
#include "loom/plugin.h"
#include "loom/schedule.h"
#include "loom/tensor.h"
#include "loom/tokenizer.h"
#endif
