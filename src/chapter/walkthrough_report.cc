// The walkthrough as the book prints it. See include/qkv/chapter/walkthrough_report.h.
#include "qkv/chapter/walkthrough_report.h"

#include <sstream>

#include "qkv/core/print.h"
#include "qkv/io/heatmap_svg.h"
#include "qkv/io/tensor_json.h"
#include "qkv/models/family.h"
#include "qkv/models/generation.h"

namespace qkv {
namespace {

std::string list(const std::vector<std::string>& words) {
  std::string s = "[";
  for (size_t i = 0; i < words.size(); ++i) s += (i ? ", '" : "'") + words[i] + "'";
  return s + "]";
}

}  // namespace

std::string walkthrough_text(const Walkthrough& w) {
  std::ostringstream out;
  out << "qkv walkthrough: chapter 3 of \"Build a Large Language Model From Scratch\" on\n  \"" << w.text << "\"\n\n";
  out << "Tokens   : " << list(w.words) << "\nVocab    : {";
  for (size_t i = 0; i < w.vocab.size(); ++i) out << (i ? ", '" : "'") << w.vocab[i] << "': " << i;
  out << "}\nToken IDs: [";
  for (size_t i = 0; i < w.ids.size(); ++i) out << (i ? ", " : "") << w.ids[i];
  out << "]\n";
  if (!w.book_embeddings)
    out << "(words the book has no embedding for get rows of nn.Embedding drawn after torch.manual_seed(0))\n";
  std::string section;
  for (const WalkthroughStep& s : w.steps) {
    if (s.section != section) {
      section = s.section;
      out << "\n== " << section << " ==\n";
    }
    out << "\n" << s.name << ": " << s.caption << "\n" << to_string(s.value) << "\n";
  }
  return out.str();
}

nlohmann::json walkthrough_json(const Walkthrough& w) {
  nlohmann::json j = nlohmann::json::object();
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < w.vocab.size(); ++i) vocab[w.vocab[i]] = i;
  j["tiny_vocab.ids"] = {{"tokens", w.words}, {"vocab", vocab}, {"ids", w.ids}};
  for (const WalkthroughStep& s : w.steps) j[s.name] = tensor_to_json(s.value);
  return j;
}

std::vector<OutputFile> walkthrough_pictures(const Walkthrough& w, const std::string& dir, const std::string& what) {
  HeatmapOptions o;
  o.row_labels = w.words;
  o.causal = true;
  std::vector<OutputFile> files;
  for (const WalkthroughPicture& p : w.pictures) {
    o.title = p.title;
    files.push_back({dir + "/" + p.file, heatmap_svg(p.weights, o), what});
  }
  return files;
}

GptFigure gpt_figure(const std::string& vocab_dir) {
  LoadOptions o;
  o.vocab_dir = vocab_dir;
  LoadedModel m = make_model("gpt2-small", 123, o);
  GptFigure fig;
  fig.ids = m.encode("Hello, I am");
  SamplingOptions greedy;
  greedy.max_new_tokens = 10;
  greedy.temperature = 0.0;
  const std::vector<int64_t> out = generate(*m.model, fig.ids, greedy);
  fig.ids.insert(fig.ids.end(), out.begin(), out.end());
  fig.text = m.decode(fig.ids);
  return fig;
}

std::string gpt_figure_text(const GptFigure& fig) {
  std::ostringstream out;
  out << "Output:";
  for (int64_t id : fig.ids) out << " " << id;
  out << "\n\"" << fig.text << "\"\n(the weights are random: the book's point is that the model runs, not that it "
      << "writes sense; chapter 5 trains it: qkv train --model gpt)\n";
  return out.str();
}

}  // namespace qkv
