// wedge as a C++ library: the one header a program includes.
//
//   find_package(wedge CONFIG REQUIRED)
//   target_link_libraries(app PRIVATE wedge::wedge)
//   #include <wedge/wedge.h>
//
// What it brings, by room (each room's README says where to start reading):
//   engine/  Tensor, autograd (backward, NoGradGuard), Module (save / load), AdamW and SGD
//            with learning-rate schedules, safetensors, RNG, SHA-256
//   ops/     the differentiable ops (ops::matmul, ops::cross_entropy, ops::mse_loss, ...),
//            ops::argmax, and the basic layers as Modules (nn::Linear, nn::Embedding,
//            nn::LayerNorm, nn::Dropout)
//   models/  TransformerLM and GrassmannLM, and the causality audit
//   data/    the WordPiece tokenizer, WikiText-2 and SNLI loaders, LM batching
#pragma once

#include "engine/autograd.h"
#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/module.h"
#include "engine/optim.h"
#include "engine/rng.h"
#include "engine/safetensors.h"
#include "engine/sha256.h"
#include "engine/tensor.h"
#include "engine/thread_pool.h"
#include "ops/nn.h"
#include "ops/ops.h"
#include "models/audit.h"
#include "models/edge_sets.h"
#include "models/grassmann.h"
#include "models/lm.h"
#include "models/sheaf.h"
#include "models/transformer.h"
#include "data/dependency_graph.h"
#include "data/dependency_probe.h"
#include "data/snli.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "data/vocab.h"
#include "data/wikitext.h"
