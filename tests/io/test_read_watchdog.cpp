// The read watchdog's limit (io/read_watchdog.hpp): the default until the driver passes the
// deck's checkpoint.metadata_timeout_s, and only positive limits.
#include <stdexcept>

#include "catch.hpp"
#include "io/deck.hpp"
#include "io/read_watchdog.hpp"

using tptrain::io::ReadWatchdog;

TEST_CASE("read watchdog: the configured limit, the deck's default", "[io][read_watchdog]") {
  CHECK(tptrain::io::Deck().checkpoint.metadata_timeout_s == ReadWatchdog::kDefaultSeconds);
  ReadWatchdog::set_configured_seconds(7.5);
  {
    const ReadWatchdog w("some.h5");
    CHECK(w.seconds() == 7.5);
    const ReadWatchdog explicit_limit("some.h5", 2);
    CHECK(explicit_limit.seconds() == 2);
  }
  CHECK_THROWS_AS(ReadWatchdog::set_configured_seconds(0), std::invalid_argument);
  CHECK_THROWS_AS(ReadWatchdog::set_configured_seconds(-1), std::invalid_argument);
  CHECK(ReadWatchdog::configured_seconds() == 7.5);
  ReadWatchdog::set_configured_seconds(ReadWatchdog::kDefaultSeconds);
}
