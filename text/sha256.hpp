// SHA-256 (FIPS 180-4) through OpenSSL's libcrypto: how a named encoding's rank file is known to
// be the published one (text/tiktoken_encoding.hpp).
#pragma once

#include <string>
#include <string_view>

namespace tptrain::text {

// The digest of `bytes` as 64 lowercase hex digits, as sha256sum prints it. Throws TextError if
// libcrypto fails (out of memory, a FIPS provider without SHA-256).
std::string sha256_hex(std::string_view bytes);

}  // namespace tptrain::text
