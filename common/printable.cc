#include "ddprun/common/printable.h"

namespace ddprun {
namespace {

// The length of the well-formed UTF-8 character at the start of `text` (RFC 3629's table:
// no overlong forms, no surrogates, nothing past U+10FFFF); 0 when it is not one.
std::size_t utf8_length(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto continuation = [&](std::size_t i) {
    return i < text.size() && (byte(i) & 0xc0) == 0x80;
  };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xbf;  // the second byte's range
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) low = 0xa0;
    if (lead == 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) low = 0x90;
    if (lead == 0xf4) high = 0x8f;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if (!continuation(i)) return 0;
  }
  return length;
}

std::string escaped(unsigned char c) {
  constexpr char kHex[] = "0123456789abcdef";
  return {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
}

}  // namespace

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto c = static_cast<unsigned char>(text[at]);
    std::size_t length = 1;
    std::string piece;
    if (c >= 0x20 && c < 0x7f) {
      piece.assign(1, static_cast<char>(c));
    } else if (c >= 0x80 && (length = utf8_length(text.substr(at))) > 0) {
      // U+0080..U+009F (C2 80..C2 9F) are controls too: CSI is U+009B.
      const bool c1 = c == 0xc2 && static_cast<unsigned char>(text[at + 1]) < 0xa0;
      piece = c1 ? escaped(c) + escaped(static_cast<unsigned char>(text[at + 1]))
                 : std::string(text.substr(at, length));
    } else {
      length = 1;
      piece = escaped(c);
    }
    if (out.size() + piece.size() > max_bytes) {
      return out + "...(" + std::to_string(text.size() - at) + " more bytes)";
    }
    out += piece;
    at += length;
  }
  return out;
}

std::string to_hex(const void* data, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::string text;
  text.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    text += kDigits[bytes[i] >> 4];
    text += kDigits[bytes[i] & 15];
  }
  return text;
}

}  // namespace ddprun
