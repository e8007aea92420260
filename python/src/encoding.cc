// python/src/encoding.cc - qkv::Encoding with tiktoken.Encoding's interface.
//
//   enc = qkv.get_encoding("gpt2")        # _qkv.load_gpt2() underneath; vocab_files.h finds the files
//   enc.encode("Your journey starts with one step.")      # [7120, 7002, 4940, 351, 530, 2239, 13]
//   enc.encode("<|endoftext|>")                            # ValueError, tiktoken's message
//   enc.encode("<|endoftext|>", allowed_special="all")     # [50256]
//   enc.encode_batch(texts, num_threads=8)                 # C++ threads, the GIL released
//
// tiktoken's conventions kept here: allowed_special / disallowed_special are keyword-only and take
// "all" or a collection of special tokens (names that are not special tokens of the encoding are
// ignored, as tiktoken ignores them in allowed_special); text that spells a disallowed special
// token raises ValueError with tiktoken's message; a str holding lone surrogates is encoded as
// tiktoken encodes it, with each surrogate replaced by U+FFFD; an id outside the vocabulary in
// decode* raises KeyError; decode(errors=...) decodes the bytes as bytes.decode(errors=...) does.
#include <pybind11/stl.h>

#include <algorithm>
#include <deque>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "bindings.h"
#include "qkv/text/bpe.h"
#include "qkv/text/vocab_files.h"

namespace qkv::python {
namespace {

// The UTF-8 bytes of a str. A str with lone surrogates has none; tiktoken then encodes the text
// round-tripped through UTF-16 with errors="replace" (each surrogate -> U+FFFD), and so do we.
std::string utf8_of(py::handle text, const char* what) {
  if (!PyUnicode_Check(text.ptr()))
    throw py::type_error(std::string(what) + " must be str, not " + std::string(py::str(py::type::of(text).attr("__name__"))));
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
  if (data != nullptr) return std::string(data, static_cast<size_t>(size));
  PyErr_Clear();
  py::object fixed = text.attr("encode")("utf-16", "surrogatepass").attr("decode")("utf-16", "replace");
  data = PyUnicode_AsUTF8AndSize(fixed.ptr(), &size);
  if (data == nullptr) throw py::error_already_set();
  return std::string(data, static_cast<size_t>(size));
}

// tiktoken's allowed_special / disallowed_special: "all", or a collection of strings.
SpecialTokens special_tokens_of(const Encoding& enc, py::handle arg, const char* what) {
  if (PyUnicode_Check(arg.ptr())) {
    if (py::cast<std::string>(arg) == "all") return SpecialTokens::all();
    throw py::type_error(std::string(what) + " must be \"all\" or a collection of special tokens, not the string " +
                         std::string(py::repr(arg)));
  }
  const std::vector<std::string> known = enc.special_tokens_set();
  std::vector<std::string> tokens;
  for (py::handle item : py::iter(arg)) {
    std::string t = utf8_of(item, what);
    if (std::binary_search(known.begin(), known.end(), t)) tokens.push_back(std::move(t));
  }
  return SpecialTokens::only(std::move(tokens));
}

// tiktoken's ValueError for a disallowed special token, word for word (tiktoken/core.py,
// raise_disallowed_special_token).
[[noreturn]] void raise_disallowed(const DisallowedSpecialError& e) {
  const std::string r = py::repr(py::str(e.token));
  throw py::value_error("Encountered text corresponding to disallowed special token " + r +
                        ".\nIf you want this text to be encoded as a special token, pass it to `allowed_special`, "
                        "e.g. `allowed_special={" + r + ", ...}`.\nIf you want this text to be encoded as normal text, "
                        "disable the check for this token by passing `disallowed_special=(enc.special_tokens_set - {" +
                        r + "})`.\nTo disable this check for all special tokens, pass `disallowed_special=()`.\n");
}

// Python ints for the ids 0 .. kSharedIds - 1, made once and shared by every list of ids the
// package returns (ints are immutable, so a list holding the same object twice is the same list).
// Creating a fresh int per token cost more than encoding it: on 10 MB of prose, 3.1M ids, the lists
// took 0.35 s of encode_batch's 0.41 s (int allocation and the page faults of its arenas).
constexpr TokenId kSharedIds = TokenId{1} << 18;  // o200k's 200,019 ids fit; larger ids are made per use

// Called with the GIL held (the table grows to the next power of two past the largest id seen).
PyObject* id_object(TokenId id) {
  static std::vector<PyObject*> table;  // references kept for the process's life
  if (id < 0 || id >= kSharedIds) {
    PyObject* o = PyLong_FromLongLong(id);
    if (o == nullptr) throw py::error_already_set();
    return o;
  }
  if (static_cast<size_t>(id) >= table.size()) {
    size_t n = std::max<size_t>(table.size(), 1024);
    while (n <= static_cast<size_t>(id)) n *= 2;
    table.reserve(n);
    for (size_t i = table.size(); i < n; ++i) {
      PyObject* o = PyLong_FromSize_t(i);
      if (o == nullptr) throw py::error_already_set();
      table.push_back(o);
    }
  }
  PyObject* o = table[static_cast<size_t>(id)];
  Py_INCREF(o);
  return o;
}

py::list to_list(std::span<const TokenId> ids) {
  py::list out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), id_object(ids[i]));
  return out;
}

py::list to_lists(const TokenBatch& batch) {
  py::list out(batch.size());
  for (size_t i = 0; i < batch.size(); ++i)
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), to_list(batch.ids(i)).release().ptr());
  return out;
}

std::vector<TokenId> ids_of(py::handle tokens) {
  try {
    return py::cast<std::vector<TokenId>>(tokens);
  } catch (const py::cast_error&) {
  }
  // Which element: an int too large for an id is no token of the vocabulary (tiktoken's KeyError,
  // as for any id outside it); anything else is the wrong type.
  const auto type_name = [](py::handle h) { return std::string(py::str(py::type::of(h).attr("__name__"))); };
  if (py::isinstance<py::sequence>(tokens) && !py::isinstance<py::str>(tokens) && !py::isinstance<py::bytes>(tokens)) {
    const auto seq = py::reinterpret_borrow<py::sequence>(tokens);
    for (size_t i = 0; i < seq.size(); ++i) {
      const py::object item = seq[i];
      if (!PyLong_Check(item.ptr()))
        throw py::type_error("tokens[" + std::to_string(i) + "] must be an int, not " + type_name(item));
      try {
        (void)item.cast<TokenId>();
      } catch (const py::cast_error&) {
        throw py::key_error("tokens[" + std::to_string(i) + "] is " + std::string(py::repr(item)) +
                            ", which is no token id of this encoding");
      }
    }
  }
  throw py::type_error("tokens must be a sequence of int, not " + type_name(tokens));
}

// Decoding fails only on an id outside the vocabulary: tiktoken's KeyError.
template <typename Fn>
auto decoding(Fn&& fn) {
  try {
    py::gil_scoped_release release;
    return fn();
  } catch (const Error& e) {
    throw py::key_error(e.what());
  }
}

std::vector<TokenId> encode(const Encoding& enc, py::handle text, py::handle allowed, py::handle disallowed) {
  const SpecialTokens a = special_tokens_of(enc, allowed, "allowed_special");
  const SpecialTokens d = special_tokens_of(enc, disallowed, "disallowed_special");
  const std::string t = utf8_of(text, "text");
  try {
    py::gil_scoped_release release;
    return enc.encode(t, a, d);
  } catch (const DisallowedSpecialError& e) {
    raise_disallowed(e);
  }
}

// The texts of a batch as views of their UTF-8 bytes, no copy: the bytes each str holds or caches
// (the strs held alive in `keep`), or, for a str with lone surrogates, a repaired copy in `fixed`.
std::vector<std::string_view> batch_texts(py::handle texts, std::vector<py::object>& keep,
                                          std::deque<std::string>& fixed) {
  if (PyUnicode_Check(texts.ptr())) throw py::type_error("encode_batch takes a list of str, not a str");
  std::vector<std::string_view> views;
  for (py::handle t : py::iter(texts)) {
    if (!PyUnicode_Check(t.ptr())) {
      utf8_of(t, "each text");  // raises the TypeError
    }
    keep.push_back(py::reinterpret_borrow<py::object>(t));
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(t.ptr(), &size);
    if (data != nullptr) {
      views.emplace_back(data, static_cast<size_t>(size));
    } else {
      PyErr_Clear();
      views.emplace_back(fixed.emplace_back(utf8_of(t, "each text")));
    }
  }
  return views;
}

// The ids of a batch, as Python lists. The TokenBatch is the calling thread's, kept from call to
// call so that its buffers are not allocated (and page-faulted) again for every batch.
py::list encode_batch(const Encoding& enc, py::handle texts, int num_threads, py::handle allowed,
                      py::handle disallowed) {
  const SpecialTokens a = special_tokens_of(enc, allowed, "allowed_special");
  const SpecialTokens d = special_tokens_of(enc, disallowed, "disallowed_special");
  std::vector<py::object> keep;
  std::deque<std::string> fixed;
  const std::vector<std::string_view> ts = batch_texts(texts, keep, fixed);
  if (num_threads < 1) throw py::value_error("num_threads must be >= 1, not " + std::to_string(num_threads));
  thread_local TokenBatch batch;
  try {
    py::gil_scoped_release release;
    enc.encode_batch_into(ts, batch, num_threads, a, d);
  } catch (const Error&) {
    // The batch's error names the text but not the exception's kind: find the first text that
    // fails, in order, and raise what encode raises for it (tiktoken raises the first failure).
    for (std::string_view t : ts) {
      try {
        py::gil_scoped_release release;
        enc.encode(t, a, d);
      } catch (const DisallowedSpecialError& e) {
        raise_disallowed(e);
      }
    }
    throw;
  }
  return to_lists(batch);
}

py::bytes as_bytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

}  // namespace

void bind_encoding(py::module_& m) {
  py::class_<Encoding>(m, "Encoding", "A byte-level BPE encoding with tiktoken.Encoding's interface.")
      .def_property_readonly("name", &Encoding::name)
      .def_property_readonly("n_vocab", &Encoding::n_vocab)
      .def_property_readonly("max_token_value", [](const Encoding& e) { return e.n_vocab() - 1; })
      .def_property_readonly("eot_token", &Encoding::eot_token)
      .def_property_readonly("special_tokens_set", [](const Encoding& e) {
        py::set out;
        for (const std::string& s : e.special_tokens_set()) out.add(py::str(s));
        return out;
      })
      .def("__repr__", [](const Encoding& e) { return "<Encoding " + std::string(py::repr(py::str(e.name()))) + ">"; })
      // pickled by name, as tiktoken pickles its registered encodings: unpickling (another process's
      // DataLoader worker) finds the vocabulary as get_encoding does
      .def("__reduce__",
           [](const Encoding& e) {
             return py::make_tuple(py::module_::import("qkv").attr("get_encoding"), py::make_tuple(e.name()));
           })
      .def(
          "encode",
          [](const Encoding& e, py::handle text, py::handle allowed, py::handle disallowed) {
            return to_list(encode(e, text, allowed, disallowed));
          },
          py::arg("text"), py::kw_only(), py::arg("allowed_special") = py::set(),
          py::arg("disallowed_special") = "all",
          "The ids of text; special tokens as tiktoken's allowed_special / disallowed_special say.")
      .def(
          "encode_ordinary",
          [](const Encoding& e, py::handle text) {
            const std::string t = utf8_of(text, "text");
            std::vector<TokenId> ids;
            {
              py::gil_scoped_release release;
              ids = e.encode_ordinary(t);
            }
            return to_list(ids);
          },
          py::arg("text"), "The ids of text, special tokens encoded as the plain text they are.")
      .def(
          "encode_batch",
          [](const Encoding& e, py::handle texts, int num_threads, py::handle allowed, py::handle disallowed) {
            return encode_batch(e, texts, num_threads, allowed, disallowed);
          },
          py::arg("text"), py::kw_only(), py::arg("num_threads") = 8, py::arg("allowed_special") = py::set(),
          py::arg("disallowed_special") = "all", "encode over a list of texts, on num_threads C++ threads.")
      .def(
          "encode_ordinary_batch",
          [](const Encoding& e, py::handle texts, int num_threads) {
            return encode_batch(e, texts, num_threads, py::set(), py::tuple());
          },
          py::arg("text"), py::kw_only(), py::arg("num_threads") = 8)
      .def(
          "encode_single_token",
          [](const Encoding& e, py::handle token) {
            const std::string t = PyBytes_Check(token.ptr()) ? std::string(py::cast<std::string>(token))
                                                             : utf8_of(token, "text_or_bytes");
            try {
              return e.encode_single_token(t);
            } catch (const Error&) {
              throw py::key_error(py::repr(token));
            }
          },
          py::arg("text_or_bytes"))
      .def(
          "decode",
          [](const Encoding& e, py::handle tokens, const std::string& errors) -> py::object {
            const std::vector<TokenId> ids = ids_of(tokens);
            if (errors == "replace") return py::str(decoding([&] { return e.decode(ids); }));
            return as_bytes(decoding([&] { return e.decode_bytes(ids); })).attr("decode")("utf-8", errors);
          },
          py::arg("tokens"), py::arg("errors") = "replace", "The text of the ids (bytes.decode(\"utf-8\", errors)).")
      .def(
          "decode_bytes",
          [](const Encoding& e, py::handle tokens) {
            const std::vector<TokenId> ids = ids_of(tokens);
            return as_bytes(decoding([&] { return e.decode_bytes(ids); }));
          },
          py::arg("tokens"))
      .def(
          "decode_single_token_bytes",
          [](const Encoding& e, TokenId token) { return as_bytes(decoding([&] { return e.decode_single_token_bytes(token); })); },
          py::arg("token"))
      .def(
          "decode_tokens_bytes",
          [](const Encoding& e, py::handle tokens) {
            const std::vector<TokenId> ids = ids_of(tokens);
            const std::vector<std::string> parts = decoding([&] { return e.decode_tokens_bytes(ids); });
            py::list out;
            for (const std::string& p : parts) out.append(as_bytes(p));
            return out;
          },
          py::arg("tokens"))
      .def("is_special_token", &Encoding::is_special_token, py::arg("token"));

  m.def(
      "load_gpt2",
      [](const std::string& vocab_dir) {
        py::gil_scoped_release release;
        return load_gpt2(vocab_dir);
      },
      py::arg("vocab_dir") = "",
      "GPT-2's encoding from encoder.json and vocab.bpe (SHA-256 checked), found as qkv/text/vocab_files.h says.");
}

}  // namespace qkv::python
