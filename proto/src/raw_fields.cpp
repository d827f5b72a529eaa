#include "pto/v1/raw_fields.h"

#include <algorithm>

namespace pto::v1 {
namespace {

// The most bytes of a key or a length (protobuf's ReadTag and ReadSize).
constexpr int kShortVarint = 5;

// A position in the pieces, read forwards.
class Cursor {
 public:
  explicit Cursor(const std::vector<Piece>& pieces) : pieces_(pieces) { skip_empty(); }
  bool at_end() const { return i_ == pieces_.size(); }
  uint64_t pos() const { return pos_; }  // bytes read so far
  bool byte(uint8_t* b) {
    if (at_end()) return false;
    *b = pieces_[i_].data[off_++];
    ++pos_;
    skip_empty();
    return true;
  }
  // A varint of at most `max_bytes` bytes (10 for a value; protobuf reads a
  // field's key and a length in at most 5, and refuses a longer one even
  // when its value is small, so this reader does too).
  bool varint(uint64_t* v, int max_bytes = 10) {
    *v = 0;
    for (int shift = 0; shift < 7 * max_bytes; shift += 7) {
      uint8_t b = 0;
      if (!byte(&b)) return false;
      if (shift == 63 && b > 1) return false;  // past 64 bits
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;  // a byte past max_bytes
  }
  bool fixed(int bytes, uint64_t* v) {
    *v = 0;
    for (int k = 0; k < bytes; ++k) {
      uint8_t b = 0;
      if (!byte(&b)) return false;
      *v |= uint64_t(b) << (8 * k);
    }
    return true;
  }
  // Hands the next n bytes to `use` in pieces; false if fewer remain or
  // `use` refuses.
  template <class Use>
  bool bytes(uint64_t n, Use use, bool* short_read) {
    while (n > 0) {
      if (at_end()) {
        *short_read = true;
        return false;
      }
      const size_t take = static_cast<size_t>(std::min<uint64_t>(n, pieces_[i_].size - off_));
      if (!use(pieces_[i_].data + off_, take)) return false;
      off_ += take;
      pos_ += take;
      n -= take;
      skip_empty();
    }
    return true;
  }

 private:
  void skip_empty() {
    while (i_ < pieces_.size() && off_ == pieces_[i_].size) {
      ++i_;
      off_ = 0;
    }
  }
  const std::vector<Piece>& pieces_;
  size_t i_ = 0, off_ = 0;
  uint64_t pos_ = 0;
};

}  // namespace

bool read_fields(const std::vector<Piece>& pieces, RawFieldSink& sink, std::string* why) {
  Cursor c(pieces);
  uint64_t start = 0;  // where the field being read began
  auto fault = [&](const std::string& m) {
    *why = m + " in the field at byte " + std::to_string(start);
    return false;
  };
  while (!c.at_end()) {
    start = c.pos();
    uint64_t key = 0;
    if (!c.varint(&key, kShortVarint)) return fault("a truncated or overlong field key");
    const auto field = static_cast<uint32_t>(key >> 3);
    const auto type = static_cast<uint32_t>(key & 7);
    if (field == 0 || key >> 3 > 0x1fffffff) return fault("field number " + std::to_string(key >> 3));
    bool ok = true;
    uint64_t value = 0;
    switch (type) {
      case 0:
        if (!c.varint(&value)) return fault("a truncated or overlong varint");
        ok = sink.scalar(field, value);
        break;
      case 1:
      case 5:
        if (!c.fixed(type == 1 ? 8 : 4, &value)) return fault("a truncated fixed-size field");
        ok = sink.scalar(field, value);
        break;
      case 2: {
        uint64_t n = 0;
        if (!c.varint(&n, kShortVarint)) return fault("a truncated or overlong length");
        bool short_read = false;
        if (!sink.begin(field, n)) {
          ok = false;
          break;
        }
        if (!c.bytes(
                n, [&](const uint8_t* p, size_t k) { return sink.piece(field, p, k); }, &short_read)) {
          if (short_read) return fault("a length of " + std::to_string(n) + " past the end of the message");
          ok = false;
        }
        break;
      }
      default: return fault("wire type " + std::to_string(type) + " (groups are not used)");
    }
    if (!ok) {
      why->clear();
      return false;
    }
  }
  return true;
}

bool read_fields(const grpc::ByteBuffer& bb, RawFieldSink& sink, std::string* why) {
  std::vector<grpc::Slice> slices;
  if (!bb.Dump(&slices).ok()) {
    *why = "the message cannot be read";
    return false;
  }
  std::vector<Piece> pieces;
  pieces.reserve(slices.size());
  for (const grpc::Slice& s : slices) pieces.push_back({s.begin(), s.size()});
  return read_fields(pieces, sink, why);
}

bool split_fields(const std::vector<Piece>& pieces, uint64_t take, Split* out, std::string* why) {
  Cursor c(pieces);
  *out = Split{};
  uint64_t start = 0;
  auto fault = [&](const std::string& m) {
    *why = m + " in the field at byte " + std::to_string(start);
    return false;
  };
  while (!c.at_end()) {
    start = c.pos();
    uint64_t key = 0, value = 0;
    if (!c.varint(&key, kShortVarint)) return fault("a truncated or overlong field key");
    const uint64_t field = key >> 3;
    const auto type = static_cast<uint32_t>(key & 7);
    if (field == 0 || field > 0x1fffffff) return fault("field number " + std::to_string(field));
    const bool picked = type == 2 && field < 64 && (take >> field & 1);
    if (!picked) put_varint(out->rest, key);
    switch (type) {
      case 0:
        if (!c.varint(&value)) return fault("a truncated or overlong varint");
        put_varint(out->rest, value);
        break;
      case 1:
      case 5: {
        const int width = type == 1 ? 8 : 4;
        if (!c.fixed(width, &value)) return fault("a truncated fixed-size field");
        for (int k = 0; k < width; ++k) out->rest.push_back(static_cast<char>(value >> (8 * k)));
        break;
      }
      case 2: {
        uint64_t n = 0;
        if (!c.varint(&n, kShortVarint)) return fault("a truncated or overlong length");
        if (picked) {
          if (out->taken != 0 && out->taken != field)
            return fault("fields " + std::to_string(out->taken) + " and " + std::to_string(field) + " both");
          out->taken = static_cast<uint32_t>(field);
          out->contents.emplace_back();
        } else {
          put_varint(out->rest, n);
        }
        bool short_read = false;
        const bool ok = c.bytes(
            n,
            [&](const uint8_t* p, size_t k) {
              if (picked)
                out->contents.back().push_back({p, k});
              else
                out->rest.append(reinterpret_cast<const char*>(p), k);
              return true;
            },
            &short_read);
        if (!ok) return fault("a length of " + std::to_string(n) + " past the end of the message");
        break;
      }
      default: return fault("wire type " + std::to_string(type) + " (groups are not used)");
    }
  }
  return true;
}

grpc::Slice LentSlices::slice(const void* p, size_t n) {
  {
    std::lock_guard<std::mutex> g(mu_);
    ++held_;
  }
  return grpc::Slice(const_cast<void*>(p), n, &give_back, new std::shared_ptr<LentSlices>(shared_from_this()));
}

void LentSlices::give_back(void* p) {
  auto* self = static_cast<std::shared_ptr<LentSlices>*>(p);
  {
    std::lock_guard<std::mutex> g((*self)->mu_);
    --(*self)->held_;
  }
  (*self)->cv_.notify_all();
  delete self;
}

bool LentSlices::wait(const std::function<bool()>& alive, std::string* why) {
  std::unique_lock<std::mutex> lk(mu_);
  const auto released = [&] { return held_ == 0; };
  while (!cv_.wait_for(lk, std::chrono::seconds(1), released)) {
    lk.unlock();
    const bool up = alive();
    lk.lock();
    if (up) continue;
    if (cv_.wait_for(lk, std::chrono::seconds(10), released)) return true;
    *why = "gRPC still holds " + std::to_string(held_) +
           " slice(s) of the caller's bytes 10 s after the connection closed";
    return false;
  }
  return true;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

std::string bytes_field_header(uint32_t field, uint64_t length) {
  std::string h;
  put_varint(h, (uint64_t{field} << 3) | 2);
  put_varint(h, length);
  return h;
}

}  // namespace pto::v1
