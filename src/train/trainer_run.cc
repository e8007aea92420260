// The training loop's cadence: steps, evaluations, checkpoints, stopping. See Trainer::run in
// include/qkv/train/trainer.h.
#include <exception>
#include <string>

#include "qkv/train/checkpoint.h"
#include "qkv/train/trainer.h"

namespace qkv {

RunResult Trainer::run(const RunPolicy& policy, RunObserver& observer) {
  QKV_CHECK(policy.checkpoint_every >= 0 && policy.stop_after >= 0,
            "train: checkpoint_every (", policy.checkpoint_every, ") and stop_after (", policy.stop_after,
            ") must not be negative");
  const int64_t steps = options_.steps, eval_every = options_.eval_every;
  // Data-parallel: a signal on any rank stops every rank at the same step boundary.
  auto stop_flag = [&]() -> int {
    const int flag = policy.stop_flag != nullptr ? *policy.stop_flag : 0;
    return dp_ ? dp_->max_int(flag) : flag;
  };
  auto save = [&] {
    if (policy.checkpoint_path.empty()) return;
    auto write = [&] {
      Checkpoint c = checkpoint();
      c.weights_dtype = policy.checkpoint_weights;
      save_checkpoint(policy.checkpoint_path, c);
    };
    if (!dp_) {
      write();
    } else {  // rank 0 writes; every rank learns whether it could
      std::string error;
      if (dp_->rank() == 0) {
        try {
          write();
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      if (dp_->max_int(error.empty() ? 0 : 1) != 0)
        throw AllRanksError(dp_->rank() == 0 ? error
                                             : str("rank 0 could not write the checkpoint '", policy.checkpoint_path,
                                                   "' (rank 0 says why)"));
    }
    observer.on_checkpoint(policy.checkpoint_path, steps_done());
  };
  auto evaluate_and_record = [&] {
    EvalStats e = evaluate();
    record_eval(e);
    observer.on_eval(e);
  };

  RunResult r;
  while (steps_done() < steps) {
    if (stop_flag()) {
      r.reason = StopReason::kStopFlag;
      break;
    }
    const StepStats s = step();
    r.tokens += s.tokens;
    ++r.steps_run;
    observer.on_step(s, r.tokens);
    if (has_eval() && eval_every > 0 && s.step % eval_every == 0) evaluate_and_record();
    if (policy.checkpoint_every > 0 && s.step % policy.checkpoint_every == 0 && s.step != steps) save();
    if (policy.stop_after > 0 && s.step >= policy.stop_after && s.step < steps) {
      r.reason = StopReason::kStopAfter;
      break;
    }
  }
  r.stop_flag = stop_flag();
  observer.on_steps_end(r);
  if (steps_done() >= steps && has_eval() && (evals_.empty() || evals_.back().step != steps_done()))
    evaluate_and_record();
  save();
  return r;
}

}  // namespace qkv
