#include "pto2/sim/tx8sim.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "executor_pool.h"
#include "kernel_table.h"
#include "pto/base/clock.h"
#include "tx8_cost.h"

namespace pto2::sim {

using pto::now_ns;

namespace {
constexpr uint64_t kSpmAlign = 64;

// Param kinds as the runtime passes them (DispatchPayload::param_kinds).
bool reads(uint8_t kind) { return kind == PTO_PARAM_INPUT || kind == PTO_PARAM_INOUT; }
bool writes(uint8_t kind) { return kind == PTO_PARAM_OUTPUT || kind == PTO_PARAM_INOUT; }
bool is_tensor(uint8_t kind) { return reads(kind) || writes(kind); }

TraceEvent event(std::string lane, std::string name, uint64_t start, uint64_t duration, std::string args,
                 int32_t kernel_id = -2, int32_t worker_type = 0) {
  TraceEvent e;
  e.lane = std::move(lane);
  e.name = std::move(name);
  e.start_ns = start;
  e.duration_ns = duration;
  e.args_json = std::move(args);
  e.kernel_id = kernel_id;
  e.worker_type = worker_type;
  return e;
}
}  // namespace

// One engine of one tile: the dispatch it holds, the kernel's context, and
// the simulated clock of what it runs. Touched by one thread at a time (the
// scheduler that owns the core, or the executor it rang).
struct alignas(64) Tx8SimPlatform::Core {
  Tx8SimPlatform* chip = nullptr;
  int id = 0;
  WorkerType type = WorkerType::kCube;
  DispatchPayload task;
  PTO2KernelContext context{};
  PTO2TileContext tile{};
  int64_t args[PTO2_MAX_PARAMS + 1] = {};
  std::atomic<uint64_t> finished{0};  // task id + 1 once done
  uint64_t start_ns = 0, end_ns = 0;  // wall, when record_core_times
  // The running task, in simulated time.
  uint64_t spm_used = 0;
  uint64_t clock = 0;      // this engine is free from here
  uint64_t cursor = 0;     // the task's simulated now
  uint64_t host_mark = 0;  // host time up to which compute was charged
  uint32_t moves = 0;      // DMA / NoC calls of the task
  // The run so far.
  uint64_t busy_ns = 0, tasks = 0, ddr_bytes = 0, noc_bytes = 0, dma_transfers = 0, noc_transfers = 0;
  std::vector<TraceEvent> events;
};

Status Tx8SimConfig::validate() const {
  auto bad = [](std::string m) { return Status::Error(kInvalidConfig, std::move(m)); };
  if (mesh_x < 1 || mesh_x > 16 || mesh_y < 1 || mesh_y > 16)
    return bad(fmt::format("mesh = {}x{}: each side must be in 1..16", mesh_x, mesh_y));
  if (spm_bytes < 4096 || spm_bytes > (256ull << 20) || spm_bytes % (2 * kSpmAlign) != 0)
    return bad(
        fmt::format("spm_bytes = {}: must be in 4096..{} (256 MiB) and a multiple of 128", spm_bytes, 256ull << 20));
  if (ddr_bytes < (1ull << 20)) return bad(fmt::format("ddr_bytes = {}: must be at least 1 MiB", ddr_bytes));
  if (aicpu_threads < 2 || aicpu_threads > 4)
    return bad(
        fmt::format("aicpu_threads = {}: must be in 2..4 (1 orchestrator + at least 1 scheduler)", aicpu_threads));
  if (executor_threads < -1 || executor_threads > 64)
    return bad(fmt::format("executor_threads = {}: must be -1 (automatic) or 0..64", executor_threads));
  if (!(compute_scale >= 0) || compute_scale > 1e6)
    return bad(fmt::format("compute_scale = {}: must be in 0..1e6", compute_scale));
  if (ddr_gbytes_per_s < 1e-3 || noc_gbytes_per_s < 1e-3 || ddr_gbytes_per_s > 1e6 || noc_gbytes_per_s > 1e6)
    return bad(fmt::format("ddr_gbytes_per_s = {}, noc_gbytes_per_s = {}: bandwidths must be in 0.001..1e6",
                           ddr_gbytes_per_s, noc_gbytes_per_s));
  // 9. the SPM is real host memory (committed as touched): at most 4 GiB of it.
  if (spm_bytes * static_cast<uint64_t>(tiles()) > (4ull << 30))
    return bad(fmt::format("{} tiles x spm_bytes {} = {} bytes of SPM: at most 4 GiB", tiles(), spm_bytes,
                           spm_bytes * static_cast<uint64_t>(tiles())));
  return Status::Ok();
}

int Tx8SimConfig::scheduler_threads() const { return scheduler_threads_for(aicpu_threads); }
int Tx8SimConfig::resolved_executor_threads() const { return executor_threads_for(executor_threads, aicpu_threads); }

double Tx8RunStats::utilisation() const {
  if (sim_ns == 0 || tile_busy_ns.empty()) return 0;
  uint64_t busy = 0;
  for (uint64_t b : tile_busy_ns) busy += b;
  return 100.0 * double(busy) / (2.0 * double(tile_busy_ns.size()) * double(sim_ns));
}

std::unique_ptr<Tx8SimPlatform> Tx8SimPlatform::create(const Tx8SimConfig& config, Status* error) {
  Status st = config.validate();
  if (error) *error = st;
  if (!st.ok()) return nullptr;
  auto chip = std::unique_ptr<Tx8SimPlatform>(new Tx8SimPlatform(config));
  if (!chip->spm_) {
    if (error)
      *error = Status::Error(kInvalidConfig, fmt::format("cannot reserve {} bytes of SPM for {} tiles",
                                                         config.spm_bytes * uint64_t(config.tiles()), config.tiles()));
    return nullptr;
  }
  return chip;
}

Tx8SimPlatform::Tx8SimPlatform(const Tx8SimConfig& config)
    : config_(config),
      memory_(config.ddr_bytes),
      spm_(new (std::nothrow) uint8_t[config.spm_bytes * static_cast<uint64_t>(config.tiles())]),
      kernels_(std::make_unique<KernelTable>()),
      ddr_(std::make_unique<DdrChannel>(config.ddr_gbytes_per_s, config.ddr_latency_ns)),
      regions_(std::make_unique<RegionClocks>()) {
  static const PTO2TileOps kTileOps = {&Tx8SimPlatform::spm_alloc, &Tx8SimPlatform::dma, &Tx8SimPlatform::noc};
  const int tiles = config.tiles();
  const uint64_t share = config.spm_bytes / 2;
  for (int i = 0; i < 2 * tiles; ++i) {
    cores_.push_back(std::make_unique<Core>());
    Core& c = *cores_.back();
    const int t = i % tiles;
    c.chip = this;
    c.id = i;
    c.type = i < tiles ? WorkerType::kCube : WorkerType::kVector;
    c.tile = {t % config.mesh_x,
              t / config.mesh_x,
              config.mesh_x,
              config.mesh_y,
              t,
              static_cast<int32_t>(c.type),
              spm_.get() + uint64_t(t) * config.spm_bytes + (i < tiles ? 0 : share),
              share,
              &kTileOps,
              &c};
    c.context.cluster_id = -1;
    c.context.cluster_num = 0;
    c.context.core_id = i;
    c.context.core_type = static_cast<int32_t>(c.type);
    c.context.block_num = 1;
    c.context.tile = &c.tile;
  }
  const int executors = config.resolved_executor_threads();
  if (executors > 0)
    executors_ = std::make_unique<ExecutorPool>(executors, 2 * tiles, config.spin_before_park_us, [this](int core) {
      run_core(core);
      wakeup_.notify();
    });
}

Tx8SimPlatform::~Tx8SimPlatform() { executors_.reset(); }

int Tx8SimPlatform::executor_threads() const { return executors_ ? executors_->threads() : 0; }

int Tx8SimPlatform::hops(int a, int b) const {
  const int mx = config_.mesh_x;
  return std::abs(a % mx - b % mx) + std::abs(a / mx - b / mx);
}

std::string Tx8SimPlatform::core_name(int core) const {
  const int t = tile_of(core);
  return fmt::format("{} ({},{})", core < tiles() ? "NE" : "CT", t % config_.mesh_x, t / config_.mesh_x);
}

std::string Tx8SimPlatform::group_name(int group) const {
  return fmt::format("tile ({},{})", group % config_.mesh_x, group / config_.mesh_x);
}

std::string Tx8SimPlatform::shape() const { return fmt::format("mesh {}x{}", config_.mesh_x, config_.mesh_y); }

void Tx8SimPlatform::register_kernel(int32_t func_id, WorkerType type, KernelEntry entry) {
  kernels_->add(func_id, type, entry);
}

bool Tx8SimPlatform::resolve_kernel(int32_t kernel_id, WorkerType type, uint64_t* function_bin_addr) {
  return kernels_->resolve(kernel_id, type, function_bin_addr);
}

void Tx8SimPlatform::run_starting() {
  // Every run's simulated time starts at 0 on an idle chip.
  ddr_->reset();
  regions_->reset();
  for (auto& c : cores_) {
    c->clock = 0;
    c->busy_ns = c->tasks = c->ddr_bytes = c->noc_bytes = c->dma_transfers = c->noc_transfers = 0;
    c->events.clear();
  }
}

void Tx8SimPlatform::dispatch(int core, const DispatchPayload& payload) {
  Core& c = *cores_[core];
  c.task = payload;
  c.finished.store(0, std::memory_order_relaxed);
  if (!executors_) {
    run_core(core);  // no spare CPU: the engine's work runs on this scheduler thread
    return;
  }
  executors_->ring(core);
}

bool Tx8SimPlatform::poll_finished(int core, uint64_t* task_id) {
  Core& c = *cores_[core];
  if (c.finished.load(std::memory_order_acquire) != c.task.task_id + 1) return false;
  c.finished.store(0, std::memory_order_relaxed);
  *task_id = c.task.task_id;
  return true;
}

bool Tx8SimPlatform::core_times(int core, uint64_t* start_ns, uint64_t* end_ns) {
  if (!config_.record_core_times) return false;
  *start_ns = cores_[core]->start_ns;
  *end_ns = cores_[core]->end_ns;
  return true;
}

void Tx8SimPlatform::charge_compute(Core& c) {
  const uint64_t now = now_ns();
  // compute_scale is at most 1e6 (validate), so a day of host time fits.
  c.cursor += static_cast<uint64_t>(std::min(double(now - c.host_mark) * config_.compute_scale, 9e18));
  c.host_mark = now;
}

void Tx8SimPlatform::run_core(int core) {
  Core& c = *cores_[core];
  const DispatchPayload& t = c.task;
  const int32_t n = std::clamp(t.num_args, 0, PTO2_MAX_PARAMS);
  if (t.args != nullptr) std::copy(t.args, t.args + n, c.args);
  c.args[n] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(&c.context));
  c.context.task_id = t.task_id;
  c.context.block_idx = t.block_idx;
  c.context.block_num = t.block_num;
  auto tensor = [&](int i) { return reinterpret_cast<const Tensor*>(static_cast<uintptr_t>(c.args[i])); };
  auto kind = [&](int i) { return t.param_kinds ? t.param_kinds[i] : uint8_t(PTO_PARAM_SCALAR); };

  // Simulated start: the engine is free, what the task reads was written and
  // what it writes was read.
  uint64_t start = c.clock;
  for (int i = 0; i < n; ++i)
    if (is_tensor(kind(i))) start = std::max(start, regions_->ready(*tensor(i), writes(kind(i)), t.call_id));
  c.cursor = start;
  c.spm_used = 0;
  c.moves = 0;
  const uint64_t ddr_before = c.ddr_bytes;

  c.host_mark = now_ns();
  if (config_.record_core_times) c.start_ns = c.host_mark;
  reinterpret_cast<KernelEntry>(t.function_bin_addr)(c.args);
  charge_compute(c);
  if (config_.record_core_times) c.end_ns = c.host_mark;

  if (c.moves == 0) {
    // A kernel that moved nothing itself read and wrote DDR directly: charged
    // as loading its inputs before its compute and storing its outputs after;
    // a block of an SPMD call, its share of them.
    uint64_t in = 0, out = 0;
    const uint64_t share = t.block_num > 1 ? static_cast<uint64_t>(t.block_num) : 1;
    for (int i = 0; i < n; ++i) {
      if (!is_tensor(kind(i))) continue;
      const uint64_t bytes = pto2_tensor_numel(tensor(i)) * pto2_dtype_size(tensor(i)->dtype) / share;
      if (reads(kind(i))) in += bytes;
      if (writes(kind(i))) out += bytes;
    }
    const uint64_t compute = c.cursor - start;
    const uint64_t loaded = in ? ddr_->transfer(start, in) : start;
    const uint64_t end = out ? ddr_->transfer(loaded + compute, out) : loaded + compute;
    if (config_.record_events && in)
      c.events.push_back(event(group_name(tile_of(core)) + " LSU", "load (implicit)", start, loaded - start,
                               fmt::format(R"("bytes": {}, "task": {})", in, t.task_id)));
    if (config_.record_events && out)
      c.events.push_back(event(group_name(tile_of(core)) + " LSU", "store (implicit)", loaded + compute,
                               end - loaded - compute, fmt::format(R"("bytes": {}, "task": {})", out, t.task_id)));
    c.ddr_bytes += in + out;
    c.dma_transfers += (in ? 1 : 0) + (out ? 1 : 0);
    c.cursor = end;
  }
  const uint64_t end = c.cursor;
  for (int i = 0; i < n; ++i)
    if (is_tensor(kind(i))) {
      if (reads(kind(i))) regions_->note(*tensor(i), false, end, t.call_id);
      if (writes(kind(i))) regions_->note(*tensor(i), true, end, t.call_id);
    }
  c.busy_ns += end - start;
  c.clock = end;
  ++c.tasks;
  if (config_.record_events) {
    std::string name = t.block_num > 1 ? fmt::format(" [{}/{}]", t.block_idx, t.block_num) : std::string();
    c.events.push_back(event(group_name(tile_of(core)), std::move(name), start, end - start,
                             fmt::format(R"("task": {}, "engine": "{}", "ddr_bytes": {})", t.task_id,
                                         core < tiles() ? "NE" : "CT", c.ddr_bytes - ddr_before),
                             t.kernel_id, static_cast<int32_t>(c.type)));
  }
  c.finished.store(t.task_id + 1, std::memory_order_release);
}

int32_t Tx8SimPlatform::refuse(Core& c, int32_t code, const std::string& what) {
  wakeup_.fault(code,
                fmt::format("task {} (kernel {}) on {}: {}", c.task.task_id, c.task.kernel_id, core_name(c.id), what));
  return code;
}

void* Tx8SimPlatform::spm_alloc(void* impl, uint64_t bytes) {
  Core& c = *static_cast<Core*>(impl);
  const uint64_t share = c.tile.spm_bytes;
  const uint64_t need = (bytes + kSpmAlign - 1) / kSpmAlign * kSpmAlign;
  if (bytes == 0 || need < bytes || need > share - c.spm_used) {
    c.chip->refuse(c, kInvalidArgument,
                   fmt::format("SPM allocation of {} bytes does not fit: the engine's share of the tile's SPM is {} "
                               "bytes and {} are taken",
                               bytes, share, c.spm_used));
    return nullptr;
  }
  void* p = c.tile.spm + c.spm_used;
  c.spm_used += need;
  return p;
}

bool Tx8SimPlatform::in_task_views(const Core& c, const void* p, uint64_t bytes, bool store) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const int32_t n = std::clamp(c.task.num_args, 0, PTO2_MAX_PARAMS);
  for (int i = 0; i < n; ++i) {
    const uint8_t k = c.task.param_kinds ? c.task.param_kinds[i] : uint8_t(PTO_PARAM_SCALAR);
    if (!is_tensor(k) || (store && !writes(k))) continue;
    const auto* t = reinterpret_cast<const Tensor*>(static_cast<uintptr_t>(c.args[i]));
    uint64_t lo = 0, hi = 0;  // the view's first to last byte: what the TensorMap knows it touches
    if (!view_span(*t, &lo, &hi)) continue;
    const uint64_t base = t->addr + lo, size = hi - lo;
    if (a >= base && bytes <= size && a - base <= size - bytes) return true;
  }
  return false;
}

int32_t Tx8SimPlatform::dma(void* impl, int32_t kind, void* dst, uint64_t dst_stride, const void* src,
                            uint64_t src_stride, uint64_t row_bytes, uint64_t rows) {
  Core& c = *static_cast<Core*>(impl);
  Tx8SimPlatform& chip = *c.chip;
  const char* names[] = {"DMA load (DDR->SPM)", "DMA store (SPM->DDR)", "DMA within the SPM"};
  if (kind < PTO2_DMA_LOAD || kind > PTO2_DMA_LOCAL)
    return chip.refuse(c, kInvalidArgument, fmt::format("DMA kind {} is unknown (0 load, 1 store, 2 local)", kind));
  const char* what = names[kind];
  if (rows == 0 || row_bytes == 0) return kOk;
  // Extent of each side: (rows - 1) strides plus one row, without overflow.
  auto extent = [&](uint64_t stride, uint64_t* out) {
    if (rows > 1 && stride < row_bytes) return false;
    if (__builtin_mul_overflow(rows - 1, stride, out) || __builtin_add_overflow(*out, row_bytes, out)) return false;
    return true;
  };
  uint64_t dst_span = 0, src_span = 0;
  if (!extent(dst_stride, &dst_span) || !extent(src_stride, &src_span))
    return chip.refuse(c, kInvalidArgument,
                       fmt::format("{} of {} rows x {} bytes: strides {} (dst) and {} (src) must be at least the row "
                                   "and the extent must fit in 64 bits",
                                   what, rows, row_bytes, dst_stride, src_stride));
  auto in_spm = [&](const void* p, uint64_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(c.tile.spm);
    return a >= base && bytes <= c.tile.spm_bytes && a - base <= c.tile.spm_bytes - bytes;
  };
  const bool spm_dst = kind != PTO2_DMA_STORE, spm_src = kind != PTO2_DMA_LOAD;
  const bool dst_ok = spm_dst ? in_spm(dst, dst_span) : chip.in_task_views(c, dst, dst_span, true);
  const bool src_ok = spm_src ? in_spm(src, src_span) : chip.in_task_views(c, src, src_span, false);
  if (!dst_ok || !src_ok) {
    const bool bad_dst = !dst_ok;
    const bool on_spm = bad_dst ? spm_dst : spm_src;
    return chip.refuse(c, kInvalidArgument,
                       fmt::format("{} of {} rows x {} bytes: its {} [{:#x}, +{}) is outside {}", what, rows, row_bytes,
                                   bad_dst ? "destination" : "source", reinterpret_cast<uintptr_t>(bad_dst ? dst : src),
                                   bad_dst ? dst_span : src_span,
                                   on_spm ? fmt::format("the engine's SPM share [{:#x}, +{})",
                                                        reinterpret_cast<uintptr_t>(c.tile.spm), c.tile.spm_bytes)
                                          : std::string(bad_dst ? "the views of the task's OUTPUT/INOUT tensors"
                                                                : "the views of the task's tensors")));
  }
  chip.charge_compute(c);
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (dst_stride == row_bytes && src_stride == row_bytes)
    std::memmove(d, s, rows * row_bytes);
  else
    for (uint64_t r = 0; r < rows; ++r) std::memmove(d + r * dst_stride, s + r * src_stride, row_bytes);
  const uint64_t bytes = rows * row_bytes;
  const uint64_t begin = c.cursor;
  if (kind == PTO2_DMA_LOCAL) {
    // TDMA stays in the tile: the SPM's own bandwidth, taken as the NoC link's.
    c.cursor += static_cast<uint64_t>(double(bytes) / chip.config_.noc_gbytes_per_s);
  } else {
    c.cursor = chip.ddr_->transfer(c.cursor, bytes);
    c.ddr_bytes += bytes;
  }
  ++c.moves;
  ++c.dma_transfers;
  if (chip.config_.record_events)
    c.events.push_back(event(chip.group_name(c.tile.tile) + " LSU", what, begin, c.cursor - begin,
                             fmt::format(R"("bytes": {}, "task": {})", bytes, c.task.task_id)));
  c.host_mark = now_ns();  // the copy's host time is not compute
  return kOk;
}

int32_t Tx8SimPlatform::noc(void* impl, int32_t put, int32_t tile, uint64_t remote_offset, void* local,
                            uint64_t bytes) {
  Core& c = *static_cast<Core*>(impl);
  Tx8SimPlatform& chip = *c.chip;
  const char* what = put ? "NoC put" : "NoC get";
  if (tile < 0 || tile >= chip.tiles())
    return chip.refuse(c, kInvalidArgument,
                       fmt::format("{}: tile {} is not on the chip (0..{})", what, tile, chip.tiles() - 1));
  const uint64_t spm = chip.config_.spm_bytes;
  if (bytes > spm || remote_offset > spm - bytes)
    return chip.refuse(c, kInvalidArgument,
                       fmt::format("{} of {} bytes at offset {} of tile {}'s SPM: outside its {} bytes", what, bytes,
                                   remote_offset, tile, spm));
  const auto a = reinterpret_cast<uintptr_t>(local), base = reinterpret_cast<uintptr_t>(c.tile.spm);
  if (a < base || bytes > c.tile.spm_bytes || a - base > c.tile.spm_bytes - bytes)
    return chip.refuse(c, kInvalidArgument,
                       fmt::format("{} of {} bytes: the local side [{:#x}, +{}) is outside the engine's SPM share "
                                   "[{:#x}, +{})",
                                   what, bytes, a, bytes, base, c.tile.spm_bytes));
  chip.charge_compute(c);
  uint8_t* remote = chip.spm_.get() + uint64_t(tile) * spm + remote_offset;
  if (put)
    std::memmove(remote, local, bytes);
  else
    std::memmove(local, remote, bytes);
  const int hops = chip.hops(c.tile.tile, tile);
  const uint64_t begin = c.cursor;
  c.cursor +=
      uint64_t(hops) * chip.config_.hop_ns + static_cast<uint64_t>(double(bytes) / chip.config_.noc_gbytes_per_s);
  c.noc_bytes += bytes;
  ++c.moves;
  ++c.noc_transfers;
  if (chip.config_.record_events)
    c.events.push_back(event(chip.group_name(c.tile.tile) + " LSU", fmt::format("{} tile {}", what, tile), begin,
                             c.cursor - begin,
                             fmt::format(R"("bytes": {}, "hops": {}, "task": {})", bytes, hops, c.task.task_id)));
  c.host_mark = now_ns();
  return kOk;
}

Tx8RunStats Tx8SimPlatform::run_stats() const {
  Tx8RunStats s;
  s.tile_busy_ns.assign(tiles(), 0);
  for (const auto& c : cores_) {
    s.sim_ns = std::max(s.sim_ns, c->clock);
    s.tasks += c->tasks;
    s.ddr_bytes += c->ddr_bytes;
    s.noc_bytes += c->noc_bytes;
    s.dma_transfers += c->dma_transfers;
    s.noc_transfers += c->noc_transfers;
    s.tile_busy_ns[tile_of(c->id)] += c->busy_ns;
  }
  return s;
}

std::string Tx8SimPlatform::run_summary(uint64_t wall_ns) const {
  const Tx8RunStats s = run_stats();
  std::string out = fmt::format(
      "tx8sim (simulated time): {} kernel runs in {:.3f} us simulated ({:.1f} us wall) on a {}x{} mesh; tiles busy "
      "{:.1f}% (NE + CT busy time / (2 engines x tiles x simulated time)); DDR {} bytes in {} transfers, NoC {} bytes "
      "in {} transfers",
      s.tasks, double(s.sim_ns) / 1000.0, double(wall_ns) / 1000.0, config_.mesh_x, config_.mesh_y, s.utilisation(),
      s.ddr_bytes, s.dma_transfers, s.noc_bytes, s.noc_transfers);
  std::string per_tile;
  for (int t = 0; t < tiles(); ++t)
    per_tile += fmt::format("{}({},{}) {:.1f}%", t % 8 == 0 ? "\n    " : "  ", t % config_.mesh_x, t / config_.mesh_x,
                            s.sim_ns ? 100.0 * double(s.tile_busy_ns[t]) / (2.0 * double(s.sim_ns)) : 0.0);
  return out + "\n  per tile (busy, % of its 2 engines x simulated time):" + per_tile;
}

std::vector<TraceEvent> Tx8SimPlatform::trace_events() const {
  std::vector<TraceEvent> all;
  for (const auto& c : cores_) all.insert(all.end(), c->events.begin(), c->events.end());
  return all;
}

}  // namespace pto2::sim
