#pragma once
// Text from outside ddprun (a file another program wrote, a peer on the network) made safe
// to print on a terminal.

#include <cstddef>
#include <string>
#include <string_view>

namespace ddprun {

// `text` with every byte that could move the cursor, recolour or retitle a terminal, or
// fake a line of ddprun's own written as "\xNN" (two lower-case hex digits): bytes below
// 0x20 (ESC, CR, LF and TAB included), DEL (0x7f), the C1 controls U+0080 to U+009F, and
// every byte that is not part of well-formed UTF-8 (overlong forms and surrogates
// included). Other UTF-8 is kept. At most `max_bytes` of the result come before the
// marker "...(N more bytes)" (N counts bytes of `text` left out); an escape or a character
// is never cut in two. Pure; thread-safe.
std::string printable(std::string_view text, std::size_t max_bytes);

// The `size` bytes at `data` as lower-case hex digits, two a byte. Pure; thread-safe.
std::string to_hex(const void* data, std::size_t size);

}  // namespace ddprun
