// Fine-tuning, in C++, a language model that `wedge train` trained: the run folder holds all
// a program needs (config.json for the sizes, vocab.txt for the tokenizer, best.safetensors
// for the weights), so the model is rebuilt with make_model, its weights loaded with
// Module::load, and trained further on a text file of your own:
//
//   SGD with Nesterov momentum 0.9, lr warm-up then cosine (an LrSchedule the optimizer
//   follows by itself), on random windows of the file's first 90 %; the last 10 % held out.
//
// It prints the held-out loss and next-token accuracy (ops::argmax) before and after, saves
// the tuned weights with Module::save, loads them into a fresh model and checks that it
// scores the held-out text bit for bit the same. It exits 1 unless the held-out loss fell.
//
//   finetune RUN TEXT_FILE [--steps N] [--lr X] [--out FILE]
//
// RUN must be a run over WordPiece text (`--data text` or `--data wikitext2`).
#include <wedge/wedge.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

using namespace wedge;

namespace {

struct Options {
  std::string run, text_file, out;
  std::int64_t steps = 60;
  double lr = 0.02;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The mean next-token loss and accuracy over consecutive windows of `block` + 1 tokens.
struct Score {
  double loss = 0, accuracy = 0;
};
Score score(models::LanguageModel& model, const std::vector<std::int32_t>& ids, std::int64_t block) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  std::int64_t right = 0, predicted = 0;
  for (std::size_t start = 0; start + 1 < ids.size(); start += static_cast<std::size_t>(block)) {
    const auto n = static_cast<std::int64_t>(std::min<std::size_t>(static_cast<std::size_t>(block), ids.size() - 1 - start));
    const std::vector<std::int32_t> x(ids.begin() + start, ids.begin() + start + n);
    const std::vector<std::int32_t> y(ids.begin() + start + 1, ids.begin() + start + n + 1);
    const Tensor logits = ops::reshape(model.forward(Tensor::from_vector(x, {1, n})), {n, -1});
    loss_sum += ops::cross_entropy(logits, Tensor::from_vector(y, {n})).item() * double(n);
    const std::vector<std::int32_t> best = ops::argmax(logits, -1).to_vector<std::int32_t>();
    for (std::int64_t t = 0; t < n; ++t) right += best[t] == y[t];
    predicted += n;
  }
  model.train();
  return {loss_sum / double(predicted), double(right) / double(predicted)};
}

int run(const Options& o) {
  // The run folder: sizes, vocabulary and weights.
  const nlohmann::json config_json = nlohmann::json::parse(read_file(o.run + "/config.json"));
  const models::LMConfig config = config_json.at("model").get<models::LMConfig>();
  const std::int64_t block = config_json.at("train").value("block", config.block);
  if (config_json.at("train").value("tokenizer", std::string("wordpiece")) != "wordpiece")
    throw std::runtime_error(o.run + " was not trained on WordPiece text (train it with --data text or wikitext2)");
  const data::Tokenizer tokenizer = data::Tokenizer::from_file(o.run + "/vocab.txt");
  std::unique_ptr<models::LanguageModel> model = models::make_model(config);
  model->load(o.run + "/best.safetensors");

  // The new text: the first 90 % to train on, the rest held out.
  const std::vector<std::int32_t> ids = tokenizer.encode(read_file(o.text_file));
  const auto held_from = static_cast<std::int64_t>(ids.size()) * 9 / 10;
  if (held_from < block + 1 || static_cast<std::int64_t>(ids.size()) - held_from < 2)
    throw std::runtime_error(o.text_file + ": " + std::to_string(ids.size()) + " tokens are too few to fine-tune on");
  const std::vector<std::int32_t> train(ids.begin(), ids.begin() + held_from), held(ids.begin() + held_from, ids.end());
  std::printf("%s: %s model, %lld parameters; %s: %zu tokens to train on, %zu held out\n", o.run.c_str(),
              config.model.c_str(), static_cast<long long>(model->num_parameters()), o.text_file.c_str(), train.size(),
              held.size());
  const Score before = score(*model, held, block);
  std::printf("before: held-out loss %.4f, next-token accuracy %.1f%%\n", before.loss, 100 * before.accuracy);

  SgdConfig sgd;
  sgd.lr = o.lr;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  Sgd optimizer(model->named_parameters(), sgd, decays_by_default);
  LrSchedule schedule;
  schedule.kind = LrSchedule::Kind::WarmupCosine;
  schedule.base_lr = o.lr;
  schedule.warmup_steps = std::max<std::int64_t>(1, o.steps / 10);
  schedule.total_steps = o.steps;
  schedule.min_lr = o.lr / 10;
  optimizer.set_schedule(schedule);  // every step() sets its own lr

  Generator pick(/*seed=*/1);
  const std::int64_t batch = 8;
  for (std::int64_t step = 1; step <= o.steps; ++step) {
    std::vector<std::int32_t> x, y;
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto at = static_cast<std::size_t>(pick.integer(static_cast<std::uint64_t>(train.size()) - block - 1));
      x.insert(x.end(), train.begin() + at, train.begin() + at + block);
      y.insert(y.end(), train.begin() + at + 1, train.begin() + at + block + 1);
    }
    const Tensor logits = model->forward(Tensor::from_vector(x, {batch, block}));
    Tensor loss = ops::cross_entropy(ops::reshape(logits, {batch * block, -1}), Tensor::from_vector(y, {batch * block}));
    const Tensor aux = model->auxiliary_loss();  // SheafStateLM's gluing and balance terms
    (aux.defined() ? loss + aux : loss).backward();
    optimizer.step(clip_scale(grad_norm(model->parameters()), 1.0));
    optimizer.zero_grad();
    if (step == 1 || step % 20 == 0 || step == o.steps)
      std::printf("step %4lld  loss %.4f  lr %.4g\n", static_cast<long long>(step), loss.item(), optimizer.lr());
  }

  const Score after = score(*model, held, block);
  std::printf("after:  held-out loss %.4f, next-token accuracy %.1f%%\n", after.loss, 100 * after.accuracy);

  // Saved and loaded into a fresh model, the tuned weights score the same, bit for bit.
  model->save(o.out);
  std::unique_ptr<models::LanguageModel> again = models::make_model(config);
  again->load(o.out);
  const Score reloaded = score(*again, held, block);
  std::printf("saved to %s; reloaded: held-out loss %.4f\n", o.out.c_str(), reloaded.loss);
  if (reloaded.loss != after.loss) {
    std::fprintf(stderr, "FAIL: the reloaded model scores %.17g, the tuned one %.17g\n", reloaded.loss, after.loss);
    return 1;
  }
  if (!(after.loss < before.loss)) {
    std::fprintf(stderr, "FAIL: the held-out loss did not fall (%.4f -> %.4f)\n", before.loss, after.loss);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Options o;
    std::vector<std::string> positional;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--steps") o.steps = std::stoll(value());
      else if (a == "--lr") o.lr = std::stod(value());
      else if (a == "--out") o.out = value();
      else if (a.rfind("--", 0) == 0) throw std::invalid_argument("unknown flag " + a);
      else positional.push_back(a);
    }
    if (positional.size() != 2) {
      std::fprintf(stderr, "usage: finetune RUN TEXT_FILE [--steps N] [--lr X] [--out FILE]\n");
      return 2;
    }
    o.run = positional[0];
    o.text_file = positional[1];
    if (o.steps < 1) throw std::invalid_argument("--steps must be at least 1");
    if (o.out.empty()) o.out = o.run + "/finetuned.safetensors";
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
