// Scalar attributes of HDF5 objects, read defensively (the file may be damaged) and written the
// way the checkpoint schema wants them (docs/checkpoints.md). `where` names the object that
// holds the attribute in messages ("" for the root group, "/train/" for group /train, ...):
// "attribute /train/seed is not a single integer". Failures are recorded in `st`; nothing throws.
//
// Why the care: a flipped byte in an attribute's header can make HDF5 read a huge size or walk
// a corrupt heap. So attributes are opened by their known names (H5Aexists_by_name, H5Aopen)
// rather than by iterating over whatever the file claims to hold, sizes are checked against
// bounds before any buffer is allocated, and names listed by index are bounded in number and
// length. What libhdf5 cannot be protected from (a variable-length string whose global-heap
// collection is corrupt can make H5Aread loop) is bounded in time by io/read_watchdog.hpp.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/hdf5_check.hpp"

namespace tptrain::io::h5 {

// Largest string attribute read (the resolved deck is a few KiB).
inline constexpr std::size_t kMaxStringAttributeBytes = std::size_t{16} << 20;
// Bounds on names listed from one object (/train holds a handful).
inline constexpr hsize_t kMaxListedAttributes = 4096;
inline constexpr std::size_t kMaxAttributeNameBytes = 1024;

std::string attr_what(std::string_view where, const char* name);

// Does `loc` carry attribute `name`? (false, with st failed, when that cannot be told).
bool attr_exists(hid_t loc, const char* name, Status& st, std::string_view where = {});

std::optional<std::int64_t> read_int_attr(hid_t loc, const char* name, Status& st,
                                          std::string_view where = {});

// An unsigned integer of at most 64 bits (a checksum), so that no value is clipped.
std::optional<std::uint64_t> read_u64_attr(hid_t loc, const char* name, Status& st,
                                           std::string_view where = {});

// A single floating-point number (any size), as a double.
std::optional<double> read_float_attr(hid_t loc, const char* name, Status& st, std::string_view where = {});

// A single string, fixed-length or variable-length, of at most kMaxStringAttributeBytes.
// Fixed-length strings are sized from the type (checked against the bound and the attribute's
// storage size) before anything is read.
std::optional<std::string> read_string_attr(hid_t loc, const char* name, Status& st,
                                            std::string_view where = {});

// One line describing any attribute's value, for people: scalars in full, strings quoted and
// shortened, arrays by type and size, "(unreadable: ...)" when it cannot be read.
std::string describe_attr(hid_t loc, const char* name);

// Names of the attributes of `loc`, in increasing name order, listed by index (not by
// H5Aiterate) with the bounds above; a name that breaks them fails st.
std::vector<std::string> attribute_names(hid_t loc, Status& st, std::string_view where);

// Creates a scalar attribute and writes it.
void write_attr(hid_t loc, const char* name, hid_t file_type, hid_t mem_type, const void* value,
                Status& st, std::string_view where = {});
// A variable-length UTF-8 string (h5py reads it as str).
void write_string_attr(hid_t loc, const char* name, const std::string& value, Status& st);

// "int32", "float32", "uint64be", "string", ... for messages and tables.
std::string type_text(hid_t type);

}  // namespace tptrain::io::h5
