// A count of elements or bytes that cannot wrap. Every integer figure of a plan (parameters,
// bytes by category, the totals) is computed as a Count: a result beyond the signed 64-bit range
// throws plan::Overflow instead of wrapping into a small or negative number, and make_plan turns
// that into a refusal naming the deck's keys (src/plan/plan.cpp). The formulas keep their plain
// arithmetic; only the type of their operands changes.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace tptrain::plan {

// A figure beyond 2^63 − 1.
struct Overflow : std::overflow_error {
  Overflow() : std::overflow_error("tptrain: plan: a count exceeds 2^63 - 1") {}
};

class Count {
 public:
  constexpr Count() = default;
  // Implicit from any integer, so that formulas read as before; an unsigned one beyond the range throws.
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  constexpr Count(I v) : v_(static_cast<std::int64_t>(v)) {  // NOLINT
    if constexpr (std::is_unsigned_v<I>)
      if (v > static_cast<std::make_unsigned_t<std::int64_t>>(kMax)) throw Overflow();
  }
  constexpr operator std::int64_t() const { return v_; }  // NOLINT
  constexpr std::int64_t value() const { return v_; }

  // Checked with comparisons (CERT INT32-C) rather than compiler builtins: src/ is compiled by
  // nvcc too in CUDA builds.
  friend Count operator+(Count a, Count b) {
    if ((b.v_ > 0 && a.v_ > kMax - b.v_) || (b.v_ < 0 && a.v_ < kMin - b.v_)) throw Overflow();
    return a.v_ + b.v_;
  }
  friend Count operator-(Count a, Count b) {
    if ((b.v_ < 0 && a.v_ > kMax + b.v_) || (b.v_ > 0 && a.v_ < kMin + b.v_)) throw Overflow();
    return a.v_ - b.v_;
  }
  friend Count operator*(Count a, Count b) {
    const std::int64_t x = a.v_, y = b.v_;
    const bool overflows = x > 0 ? (y > 0 ? x > kMax / y : y < kMin / x)
                                 : (y > 0 ? x < kMin / y : x != 0 && y < kMax / x);
    if (overflows) throw Overflow();
    return x * y;
  }
  friend Count operator/(Count a, Count b) {
    if (b.v_ == 0) throw std::domain_error("tptrain: plan: a count divided by 0");
    if (b.v_ == -1) return Count(0) - a;  // INT64_MIN / -1 overflows
    return a.v_ / b.v_;
  }
  Count& operator+=(Count b) { return *this = *this + b; }
  Count& operator*=(Count b) { return *this = *this * b; }

  // Count ∘ int and int ∘ Count: exact matches, so that they are chosen over the built-in
  // operators on the converted Count (which would wrap).
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator+(Count a, I b) { return a + Count(b); }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator+(I a, Count b) { return Count(a) + b; }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator-(Count a, I b) { return a - Count(b); }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator-(I a, Count b) { return Count(a) - b; }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator*(Count a, I b) { return a * Count(b); }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator*(I a, Count b) { return Count(a) * b; }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator/(Count a, I b) { return a / Count(b); }
  template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  friend Count operator/(I a, Count b) { return Count(a) / b; }

 private:
  static constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  static constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  std::int64_t v_ = 0;
};

}  // namespace tptrain::plan
