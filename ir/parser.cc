#include "ir/parser.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/infer.h"
#include "ir/verifier.h"
#include "support/errors.h"
#include "support/file_io.h"

namespace pgq {
namespace {

enum class Tok : uint8_t {
  kEnd, kValueName, kGraphName, kIdent, kNumber, kString,
  kLParen, kRParen, kLBracket, kRBracket, kLBrace, kRBrace, kComma, kEquals, kColon,
};

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // names without their sigil; strings unescaped
  int line = 1;
  int col = 1;
};

std::string_view describe(Tok kind) {
  switch (kind) {
    case Tok::kEnd: return "end of file";
    case Tok::kValueName: return "a %value";
    case Tok::kGraphName: return "a @graph name";
    case Tok::kIdent: return "an identifier";
    case Tok::kNumber: return "a number";
    case Tok::kString: return "a string";
    case Tok::kLParen: return "'('";
    case Tok::kRParen: return "')'";
    case Tok::kLBracket: return "'['";
    case Tok::kRBracket: return "']'";
    case Tok::kLBrace: return "'{'";
    case Tok::kRBrace: return "'}'";
    case Tok::kComma: return "','";
    case Tok::kEquals: return "'='";
    case Tok::kColon: return "':'";
  }
  return "?";
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '/';
}
bool isIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  Lexer(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  [[noreturn]] void fail(int line, int col, const std::string& what) const {
    throw Error(fmt::format("{}:{}:{}: {}", file_, line, col, what));
  }

  Token next() {
    skipSpaceAndComments();
    Token tok;
    tok.line = line_;
    tok.col = col_;
    if (pos_ >= text_.size()) return tok;
    char c = text_[pos_];
    auto single = [&](Tok kind) {
      advance();
      tok.kind = kind;
      return tok;
    };
    switch (c) {
      case '(': return single(Tok::kLParen);
      case ')': return single(Tok::kRParen);
      case '[': return single(Tok::kLBracket);
      case ']': return single(Tok::kRBracket);
      case '{': return single(Tok::kLBrace);
      case '}': return single(Tok::kRBrace);
      case ',': return single(Tok::kComma);
      case '=': return single(Tok::kEquals);
      case ':': return single(Tok::kColon);
      case '"': return string(tok);
      case '%':
      case '@': {
        advance();
        tok.kind = c == '%' ? Tok::kValueName : Tok::kGraphName;
        while (pos_ < text_.size() && isNameChar(text_[pos_])) tok.text += advance();
        if (tok.text.empty()) fail(tok.line, tok.col, fmt::format("expected a name after '{}'", c));
        return tok;
      }
      default: break;
    }
    if (isIdentStart(c)) {
      tok.kind = Tok::kIdent;
      while (pos_ < text_.size() && (isIdentStart(text_[pos_]) || isDigit(text_[pos_])))
        tok.text += advance();
      return tok;
    }
    if (isDigit(c) || c == '-' || c == '+') return number(tok);
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f)
      fail(tok.line, tok.col, fmt::format("unexpected character '{}'", c));
    fail(tok.line, tok.col, fmt::format("unexpected byte 0x{:02x} (is this a text IR file?)", u));
  }

 private:
  char advance() {
    char c = text_[pos_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }

  void skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') advance();
      } else {
        break;
      }
    }
  }

  Token number(Token& tok) {
    tok.kind = Tok::kNumber;
    if (text_[pos_] == '-' || text_[pos_] == '+') tok.text += advance();
    if (pos_ < text_.size() && isIdentStart(text_[pos_])) {
      while (pos_ < text_.size() && isIdentStart(text_[pos_])) tok.text += advance();
    } else {
      while (pos_ < text_.size() &&
             (isDigit(text_[pos_]) || text_[pos_] == '.' || text_[pos_] == 'e' ||
              text_[pos_] == 'E' ||
              ((text_[pos_] == '-' || text_[pos_] == '+') &&
               (tok.text.back() == 'e' || tok.text.back() == 'E'))))
        tok.text += advance();
    }
    return tok;
  }

  Token string(Token& tok) {
    tok.kind = Tok::kString;
    advance();
    while (true) {
      if (pos_ >= text_.size() || text_[pos_] == '\n')
        fail(tok.line, tok.col, "unterminated string");
      char c = advance();
      if (c == '"') return tok;
      if (c != '\\') {
        tok.text += c;
        continue;
      }
      if (pos_ >= text_.size()) fail(tok.line, tok.col, "unterminated string");
      char e = advance();
      switch (e) {
        case '"': tok.text += '"'; break;
        case '\\': tok.text += '\\'; break;
        case 'n': tok.text += '\n'; break;
        case 't': tok.text += '\t'; break;
        case 'x': {
          unsigned value = 0;
          for (int i = 0; i < 2; ++i) {
            if (pos_ >= text_.size()) fail(line_, col_, "unterminated \\x escape");
            char h = advance();
            int digit = isDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : -1;
            if (digit < 0) fail(line_, col_, "expected two lowercase hex digits after \\x");
            value = value * 16 + static_cast<unsigned>(digit);
          }
          tok.text += static_cast<char>(value);
          break;
        }
        default: fail(line_, col_ - 1, fmt::format("unknown escape '\\{}'", e));
      }
    }
  }

  std::string_view text_;
  std::string_view file_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

class Parser {
 public:
  Parser(std::string_view text, std::string_view file) : lexer_(text, file) { tok_ = lexer_.next(); }

  std::unique_ptr<Graph> parse() {
    if (tok_.kind == Tok::kEnd) fail(tok_, "empty file: expected 'graph @name {'");
    keyword("graph");
    Token name = expect(Tok::kGraphName);
    auto graph = std::make_unique<Graph>(name.text);
    expect(Tok::kLBrace);
    while (!(tok_.kind == Tok::kIdent && tok_.text == "return")) statement(*graph);
    take();
    if (tok_.kind == Tok::kValueName) {
      graph->addOutput(value(*graph));
      while (tok_.kind == Tok::kComma) {
        take();
        graph->addOutput(value(*graph));
      }
    }
    expect(Tok::kRBrace);
    if (tok_.kind != Tok::kEnd) fail(tok_, "expected end of file after the graph's '}'");
    return graph;
  }

 private:
  [[noreturn]] void fail(const Token& at, const std::string& what) const {
    lexer_.fail(at.line, at.col, what);
  }

  Token take() {
    Token current = std::move(tok_);
    tok_ = lexer_.next();
    return current;
  }

  Token expect(Tok kind) {
    if (tok_.kind != kind) fail(tok_, fmt::format("expected {}, found {}", describe(kind), found()));
    return take();
  }

  std::string found() const {
    if (tok_.kind == Tok::kIdent || tok_.kind == Tok::kNumber) return fmt::format("'{}'", tok_.text);
    if (tok_.kind == Tok::kValueName) return fmt::format("'%{}'", tok_.text);
    if (tok_.kind == Tok::kEnd) return "end of file (is the file truncated?)";
    return std::string(describe(tok_.kind));
  }

  void keyword(std::string_view word) {
    if (tok_.kind != Tok::kIdent || tok_.text != word)
      fail(tok_, fmt::format("expected '{}', found {}", word, found()));
    take();
  }

  Node* value(Graph& graph) {
    Token name = expect(Tok::kValueName);
    Node* node = graph.find(name.text);
    if (!node) fail(name, fmt::format("use of undefined value %{}", name.text));
    return node;
  }

  void statement(Graph& graph) {
    if (tok_.kind != Tok::kValueName)
      fail(tok_, fmt::format("expected a statement '%name = op(...)' or 'return', found {}", found()));
    Token def = take();
    if (graph.find(def.text)) fail(def, fmt::format("%{} is defined twice", def.text));
    expect(Tok::kEquals);
    Token op_tok = expect(Tok::kIdent);
    std::optional<Op> op = parseOp(op_tok.text);
    if (!op) fail(op_tok, fmt::format("unknown op '{}'", op_tok.text));
    expect(Tok::kLParen);
    std::vector<Node*> operands;
    if (tok_.kind != Tok::kRParen) {
      operands.push_back(value(graph));
      while (tok_.kind == Tok::kComma) {
        take();
        operands.push_back(value(graph));
      }
    }
    expect(Tok::kRParen);
    if (static_cast<int>(operands.size()) != opArity(*op))
      fail(op_tok, fmt::format("{} expects {} operand(s), got {}", op_tok.text, opArity(*op),
                               operands.size()));
    Attrs attrs;
    if (tok_.kind == Tok::kLBrace) attrs = attributes(*op);
    expect(Tok::kColon);
    TensorType type = tensorType();
    try {
      graph.create(*op, std::move(operands), std::move(attrs), std::move(type), def.text);
    } catch (const Error& e) {
      fail(op_tok, e.what());
    }
  }

  Attrs attributes(Op op) {
    Attrs attrs;
    expect(Tok::kLBrace);
    if (tok_.kind != Tok::kRBrace) {
      attribute(op, attrs);
      while (tok_.kind == Tok::kComma) {
        take();
        attribute(op, attrs);
      }
    }
    expect(Tok::kRBrace);
    return attrs;
  }

  void attribute(Op op, Attrs& attrs) {
    Token key_tok = expect(Tok::kIdent);
    std::optional<AttrKey> key = parseAttrKey(key_tok.text);
    if (!key) fail(key_tok, fmt::format("unknown attribute '{}'", key_tok.text));
    if (!opAllowsAttr(op, *key))
      fail(key_tok, fmt::format("{} has no attribute '{}'", opName(op), key_tok.text));
    if (attrs.has(*key)) fail(key_tok, fmt::format("attribute '{}' is given twice", key_tok.text));
    expect(Tok::kEquals);
    switch (attrKind(*key)) {
      case AttrKind::kInt: attrs.set(*key, integer()); break;
      case AttrKind::kFloat: attrs.set(*key, real()); break;
      case AttrKind::kString: attrs.set(*key, expect(Tok::kString).text); break;
      case AttrKind::kInts: {
        std::vector<int64_t> list;
        listOf([&] { list.push_back(integer()); });
        attrs.set(*key, std::move(list));
        break;
      }
      case AttrKind::kStrings: {
        std::vector<std::string> list;
        listOf([&] { list.push_back(expect(Tok::kString).text); });
        attrs.set(*key, std::move(list));
        break;
      }
      case AttrKind::kDirection: attrs.set(*key, named<GemmDirection>(*key)); break;
      case AttrKind::kSharding: attrs.set(*key, named<ShardingKind>(*key)); break;
      case AttrKind::kOperand: attrs.set(*key, named<GemmOperand>(*key)); break;
      case AttrKind::kRotation: attrs.set(*key, named<RopeRotation>(*key)); break;
      case AttrKind::kGroup: attrs.set(*key, named<DeviceGroup>(*key)); break;
      case AttrKind::kReduction: attrs.set(*key, named<Reduction>(*key)); break;
      case AttrKind::kRoles: {
        Token open = tok_;
        std::vector<OperandRole> list;
        listOf([&] { list.push_back(named<OperandRole>(*key)); });
        if (list.size() != 2)
          fail(open, fmt::format("{} must name one role per operand, [lhs, rhs], got {}", attrName(*key), list.size()));
        attrs.set(*key, OperandRoles{list[0], list[1]});
        break;
      }
      case AttrKind::kFormat: attrs.set(*key, format()); break;
      case AttrKind::kFormats: {
        std::vector<QuantFormat> list;
        listOf([&] { list.push_back(format()); });
        attrs.set(*key, std::move(list));
        break;
      }
    }
  }

  // A string naming a value of E (gemm_meta.def), e.g. "bwd_dgrad".
  template <GemmMetaEnum E>
  E named(AttrKey key) {
    Token tok = expect(Tok::kString);
    if (std::optional<E> value = parseName<E>(tok.text)) return *value;
    fail(tok, fmt::format("{} must be one of {}, got \"{}\"", attrName(key), fmt::join(allNames<E>(), ", "), tok.text));
  }

  // A string holding a quantization format, e.g. "int8:channel:rtn".
  QuantFormat format() {
    Token tok = expect(Tok::kString);
    try {
      return QuantFormat::parse(tok.text);
    } catch (const Error& e) {
      fail(tok, e.what());
    }
  }

  template <typename F>
  void listOf(F element) {
    expect(Tok::kLBracket);
    if (tok_.kind != Tok::kRBracket) {
      element();
      while (tok_.kind == Tok::kComma) {
        take();
        element();
      }
    }
    expect(Tok::kRBracket);
  }

  int64_t integer() {
    Token tok = expect(Tok::kNumber);
    int64_t value = 0;
    const char* begin = tok.text.data() + (tok.text.starts_with('+') ? 1 : 0);
    const char* end = tok.text.data() + tok.text.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec == std::errc::result_out_of_range) fail(tok, fmt::format("integer {} is out of range", tok.text));
    if (ec != std::errc() || ptr != end) fail(tok, fmt::format("expected an integer, found '{}'", tok.text));
    return value;
  }

  double real() {
    // "inf" and "nan" lex as identifiers; "-inf" lexes as a number.
    if (tok_.kind == Tok::kIdent && (tok_.text == "inf" || tok_.text == "nan")) {
      bool inf = take().text == "inf";
      return inf ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    }
    Token tok = expect(Tok::kNumber);
    double value = 0;
    const char* begin = tok.text.data() + (tok.text.starts_with('+') ? 1 : 0);
    const char* end = tok.text.data() + tok.text.size();
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec != std::errc() || ptr != end) fail(tok, fmt::format("expected a number, found '{}'", tok.text));
    return value;
  }

  TensorType tensorType() {
    Token dtype_tok = expect(Tok::kIdent);
    std::optional<DType> dtype = parseDType(dtype_tok.text);
    if (!dtype)
      fail(dtype_tok, fmt::format("unknown dtype '{}' (expected f32, bf16, s8, u8 or s32)",
                                  dtype_tok.text));
    std::vector<int64_t> dims;
    Token open = tok_;
    listOf([&] {
      if (dims.size() >= static_cast<size_t>(Shape::kMaxRank))
        fail(tok_, fmt::format("rank above {} is not supported", Shape::kMaxRank));
      dims.push_back(integer());
    });
    try {
      return {*dtype, Shape(std::move(dims))};
    } catch (const Error& e) {
      fail(open, e.what());
    }
  }

  Lexer lexer_;
  Token tok_;
};

}  // namespace

std::unique_ptr<Graph> parseGraph(std::string_view text, std::string_view filename) {
  return Parser(text, filename).parse();
}

std::unique_ptr<Graph> parseGraphFile(const std::string& path) {
  return parseGraph(readTextFile(path, InputKind::kIrText), path == "-" ? "<stdin>" : path);
}

}  // namespace pgq
