// The causality audit: does any output at position t depend on an input after t?
//
// Two independent checks, both in evaluation mode (no dropout):
// 1. Perturbation: for each probed position t, every token after t is replaced by a
//    different random token; the logits at every position <= t must stay bit-identical.
// 2. Gradient: the embedded tokens h0 = E[x] are made a leaf tensor; the gradient of
//    sum(logits[:, t, :]) with respect to h0[:, s, :] must be exactly zero for every
//    s > t — and must NOT be zero at s = t, or the check would be vacuous.
// Check 1 catches any leak, whatever its path; check 2 catches a dependence that happens
// to leave this particular random input unchanged, and says which input row leaked.
//
// The probed positions default to 0, the middle, L-2, and the positions around the
// largest Grassmann offset (where an off-by-one in the pairing would show).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/lm.h"

namespace wedge::models {

struct CausalityViolation {
  std::string check;       // "output" | "gradient" | "vacuous-gradient"
  std::int64_t t = 0;      // probed position: inputs after t were changed / differentiated
  std::int64_t batch = 0;  // batch row where it was seen
  // "output": the position <= t whose logits changed; "gradient": the input position
  // s > t with a non-zero gradient; "vacuous-gradient": t itself.
  std::int64_t position = 0;
  double magnitude = 0;    // max |logit change| or max |gradient| at that position
  std::string message;     // one line saying all of the above
};

struct AuditResult {
  bool passed = true;
  std::int64_t length = 0;
  std::vector<std::int64_t> positions;  // the probed t
  std::int64_t logits_compared = 0;     // number of logit values checked bit for bit
  std::int64_t gradients_checked = 0;   // number of gradient values required to be 0
  std::vector<CausalityViolation> violations;  // at most one per (check, t), in probe order
  // "causal: ..." or the first violation's message.
  std::string summary() const;
};

// The probes used when none are given: 0, L/2, L-2, (Grassmann) Δmax-1, Δmax, Δmax+1 and
// (SheafState) P-2, P-1, P, 2P-1, 2P around the patch boundaries, clipped to [0, L-2],
// sorted, without duplicates.
std::vector<std::int64_t> default_audit_positions(const LMConfig& config, std::int64_t L);

// Runs both checks on a batch of 2 random sequences of length L (2 <= L <= block) drawn
// from `seed`, on the device the model's parameters live on. The model is put in eval
// mode for the audit and restored afterwards; parameter gradients are left untouched.
// The model must be one of wedge's tied-embedding models (TransformerLM, GrassmannLM),
// which expose the embedded-input path the gradient check needs.
AuditResult audit_causal(LanguageModel& model, std::int64_t L, std::uint64_t seed,
                         std::vector<std::int64_t> positions = {});

}  // namespace wedge::models
