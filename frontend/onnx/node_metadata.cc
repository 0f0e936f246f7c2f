#include "frontend/onnx/node_metadata.h"

#include <google/protobuf/unknown_field_set.h>

namespace pgq {
namespace {

constexpr int kMetadataPropsField = 9;  // NodeProto.metadata_props (ONNX >= 1.16)

// The elements of a Python list literal of strings: "['', 'model', 'model.x']".
std::vector<std::string> pythonStringList(const std::string& text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char q = text[i];
    if (q != '\'' && q != '"') continue;
    std::string item;
    for (++i; i < text.size() && text[i] != q; ++i) {
      if (text[i] == '\\' && i + 1 < text.size()) ++i;
      item += text[i];
    }
    out.push_back(std::move(item));
  }
  return out;
}

// The text between the parentheses after `key` ("args = (...)"), brackets balanced.
std::string parenthesized(const std::string& text, const std::string& key) {
  size_t at = text.find(key);
  if (at == std::string::npos) return {};
  size_t open = text.find('(', at);
  if (open == std::string::npos) return {};
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(' || text[i] == '[') ++depth;
    if (text[i] == ')' || text[i] == ']') --depth;
    if (depth == 0) return text.substr(open + 1, i - open - 1);
  }
  return {};
}

// Top-level comma-separated items of an argument list (nested lists kept whole).
std::vector<std::string> topLevelItems(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  int depth = 0;
  for (char c : text) {
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(item);
      item.clear();
      continue;
    }
    if (!(item.empty() && c == ' ')) item += c;
  }
  while (!item.empty() && item.back() == ' ') item.pop_back();
  if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

std::string TorchNodeInfo::modulePath() const { return scopes.size() >= 2 ? scopes[scopes.size() - 2] : ""; }

std::string TorchNodeInfo::fxName() const { return scopes.empty() ? "" : scopes.back(); }

std::map<std::string, std::string> nodeMetadataProps(const onnx::NodeProto& node) {
  std::map<std::string, std::string> out;
  const google::protobuf::UnknownFieldSet& unknown = node.GetReflection()->GetUnknownFields(node);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() != kMetadataPropsField || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(f.length_delimited())) out[entry.key()] = entry.value();
  }
  return out;
}

TorchNodeInfo torchNodeInfo(const onnx::NodeProto& node) {
  TorchNodeInfo info;
  std::map<std::string, std::string> props = nodeMetadataProps(node);
  if (auto it = props.find("pkg.torch.onnx.name_scopes"); it != props.end()) {
    info.scopes = pythonStringList(it->second);
    if (!info.scopes.empty() && info.scopes.front().empty()) info.scopes.erase(info.scopes.begin());
  }
  if (auto it = props.find("pkg.torch.onnx.fx_node"); it != props.end()) {
    const std::string& fx = it->second;
    // "%linear : [num_users=1] = call_function[target=torch.ops.aten.linear.default](args = (%x, %p_w), ...)"
    if (size_t t = fx.find("target="); t != std::string::npos) {
      size_t end = fx.find(']', t);
      info.target = fx.substr(t + 7, end == std::string::npos ? std::string::npos : end - t - 7);
      if (info.target.starts_with("torch.ops.")) info.target.erase(0, 10);
    }
    info.args = topLevelItems(parenthesized(fx, "args = "));
    for (const std::string& a : info.args)
      if (a.starts_with("%p_")) info.param_args.push_back(a.substr(1));
  }
  return info;
}

std::string torchPlaceholderName(const std::string& dotted) {
  std::string s = "p_" + dotted;
  for (char& c : s)
    if (c == '.') c = '_';
  return s;
}

}  // namespace pgq
