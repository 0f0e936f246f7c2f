#include "frontend/onnx/import_once.h"

#include <sys/stat.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace pgq {
namespace {

using Values = std::map<std::string, std::vector<float>>;

// The file as it is on disk now; a file that cannot be stat'ed matches nothing (the
// import that follows says why it cannot be read).
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  off_t size = -1;
  int64_t mtime_ns = -1;
  bool operator==(const FileIdentity&) const = default;
};

FileIdentity identityOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
}

struct Entry {
  OnnxImportOptions requested;
  FileIdentity file;
  std::unique_ptr<ImportedModel> model;  // its graph is never handed out, only copied
  std::shared_ptr<const Values> held;    // until a graph takes the values
  std::weak_ptr<const Values> shared;    // after

  // A fresh import with `o` would give this one's model: the same file and parameter
  // choice, and sizes that are the ones asked for or those the first import found.
  bool matches(const OnnxImportOptions& o, const FileIdentity& now) const {
    auto same_size = [](int64_t asked, int64_t first_asked, int64_t found) {
      return asked == first_asked || (asked != 0 && asked == found);
    };
    return file.size >= 0 && file == now && o.trainable == requested.trainable && o.frozen == requested.frozen &&
           o.forward_only == requested.forward_only && same_size(o.batch, requested.batch, model->batch) &&
           same_size(o.seq_len, requested.seq_len, model->seq_len);
  }
};

std::mutex mutex;
std::map<std::string, Entry> entries;  // by the path as given
std::atomic<int64_t> imports{0};

// The entry for `o`, importing when there is none (or it no longer matches the file).
Entry& entryFor(const OnnxImportOptions& o) {
  const FileIdentity now = identityOf(o.path);
  auto it = entries.find(o.path);
  if (it != entries.end() && it->second.matches(o, now)) return it->second;
  if (it != entries.end()) entries.erase(it);  // its weights go before the new ones arrive
  auto model = std::make_unique<ImportedModel>(importOnnx(o));
  ++imports;
  Entry e;
  e.requested = o;
  e.file = now;
  e.held = std::make_shared<const Values>(std::move(model->values));
  model->values.clear();
  e.model = std::move(model);
  return entries.insert_or_assign(o.path, std::move(e)).first->second;
}

}  // namespace

ImportedSizes importedSizes(const OnnxImportOptions& options) {
  std::lock_guard lock(mutex);
  const ImportedModel& m = *entryFor(options).model;
  int64_t parameters = 0;
  for (const Node* p : m.net.params) parameters += p->shape().numElements();
  return {m.batch, m.seq_len, m.vocab, m.fingerprint, parameters};
}

TransformerGraph importedGraph(const OnnxImportOptions& options, bool values) {
  std::lock_guard lock(mutex);
  Entry* e = &entryFor(options);
  std::shared_ptr<const Values> weights;
  if (values) {
    weights = e->held ? std::move(e->held) : e->shared.lock();
    if (!weights) {  // every graph that had them is gone: read them again
      entries.erase(options.path);
      e = &entryFor(options);
      weights = std::move(e->held);
    }
    e->shared = weights;
  }
  const ImportedModel& m = *e->model;
  std::unordered_map<const Node*, Node*> copies;
  TransformerGraph t;
  t.graph = m.net.graph->clone(&copies);
  auto copy = [&](const Node* n) { return n ? copies.at(n) : nullptr; };
  t.tokens = copy(m.net.tokens);
  t.targets = copy(m.net.targets);
  t.loss = copy(m.net.loss);
  for (const Node* p : m.net.params) t.params.push_back(copy(p));
  for (const Node* c : m.constants) t.constants.push_back(copy(c));
  t.values = std::move(weights);
  return t;
}

int64_t onnxImportCount() { return imports.load(); }

}  // namespace pgq
