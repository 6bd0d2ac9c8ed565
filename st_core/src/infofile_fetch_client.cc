#include "infofile_fetch_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "announcer.h"
#include "capability.h"
#include "coding.h"
#include "log.h"
#include "protocol.h"
#include "storetorrent/v1/tracker.grpc.pb.h"

namespace st {
namespace {

using Stub = storetorrent::v1::Tracker::Stub;
using Clock = std::chrono::steady_clock;

// The tracker's kind of refusal (st_py/errors.py ERROR_KIND_KEY) and the one
// that says a file id's file was deleted (st_py/tracker/rpc/fetch_rpc.py).
constexpr char kErrorKindKey[] = "st-error";
constexpr char kFileDeleted[] = "file-deleted";

std::string FileIdText(uint64_t file_id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "file id %016llx", static_cast<unsigned long long>(file_id));
  return buf;
}

double SecondsUntil(Clock::time_point end) {
  return std::chrono::duration<double>(end - Clock::now()).count();
}

// Why a standby's answer is older than asked ("": it is not): below the
// wanted generation, or below the asker's copy in the same log.
std::string OlderThanWanted(const FetchedInfofile& got, const CopyState& have,
                            uint64_t want_generation) {
  if (got.generation < want_generation) {
    return "generation " + std::to_string(got.generation) + ", the copy needs " +
           std::to_string(want_generation);
  }
  if (!have.log_id.empty() && got.log_id == have.log_id && got.position < have.position) {
    return "log position " + std::to_string(got.position) + ", older than the copy's " +
           std::to_string(have.position);
  }
  return "";
}

}  // namespace

struct GrpcInfofileFetcher::Impl {
  std::unique_ptr<Stub> stub;  // the tracker (--tracker)
  std::shared_ptr<grpc::ChannelCredentials> creds;
  grpc::ChannelArguments args;
  std::mutex mu;  // guards the rest
  std::vector<std::string> standbys;  // sorted, from the last announce reply
  std::map<std::string, std::shared_ptr<Stub>> stubs;  // a channel per standby listed
  std::map<std::string, Clock::time_point> benched;  // standby -> when it last did not answer
  uint64_t turn = 0;  // which standby is asked first next (spread; from the peer id: peers differ)

  // The standbys to ask, in order (a different one first each time), with
  // their stubs; the benched ones left out.
  std::vector<std::pair<std::string, std::shared_ptr<Stub>>> Order() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<std::pair<std::string, std::shared_ptr<Stub>>> out;
    auto now = Clock::now();
    for (const std::string& a : standbys) {
      auto b = benched.find(a);
      if (b != benched.end() && now - b->second < std::chrono::duration<double>(kBenchS)) continue;
      out.emplace_back(a, stubs[a]);
    }
    if (!out.empty()) std::rotate(out.begin(), out.begin() + (turn++ % out.size()), out.end());
    return out;
  }
};

GrpcInfofileFetcher::GrpcInfofileFetcher(FetchClientOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  impl_->turn = std::hash<std::string>()(options_.peer_id);
  grpc::ChannelArguments& args = impl_->args;
  // A tracker restarting must not leave the peer backing off for minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  impl_->creds = grpc::InsecureChannelCredentials();
  if (!options_.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.ca_pem;
    ssl.pem_cert_chain = options_.cert_pem;
    ssl.pem_private_key = options_.key_pem;
    impl_->creds = grpc::SslCredentials(ssl);
  }
  impl_->stub =
      storetorrent::v1::Tracker::NewStub(grpc::CreateCustomChannel(TrackerTarget(options_.tracker),
                                                                   impl_->creds, args));
}

GrpcInfofileFetcher::~GrpcInfofileFetcher() = default;

void GrpcInfofileFetcher::SetStandbys(const std::vector<std::string>& addrs) {
  std::vector<std::string> sorted = addrs;
  std::sort(sorted.begin(), sorted.end());
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (sorted == impl_->standbys) return;
  std::map<std::string, std::shared_ptr<Stub>> stubs;
  for (const std::string& a : sorted) {
    auto it = impl_->stubs.find(a);
    stubs[a] = it != impl_->stubs.end()
                   ? it->second
                   : std::shared_ptr<Stub>(storetorrent::v1::Tracker::NewStub(
                         grpc::CreateCustomChannel(a, impl_->creds, impl_->args)));
  }
  std::string list;
  for (const std::string& a : sorted) list += (list.empty() ? "" : ", ") + a;
  ST_LOG_INFO("infofile copies: the tracker names %zu standby(s) serving FetchInfofile%s%s",
              sorted.size(), sorted.empty() ? "" : ": ", list.c_str());
  impl_->stubs = std::move(stubs);
  impl_->standbys = std::move(sorted);
}

namespace {

// One FetchInfofile call of `req` to `stub` (`who`: its address, for
// messages), giving up after deadline_s; the reply whole in *out.
Status Call(Stub* stub, const std::string& who, const storetorrent::v1::FetchInfofileRequest& req,
            const FetchClientOptions& options, double deadline_s, FetchedInfofile* out) {
  *out = FetchedInfofile();
  grpc::ClientContext ctx;
  if (!options.capability_key.empty()) {
    Capability cap;
    cap.ops = kOpPeer;
    cap.expires = UnixNow() + 300;
    cap.user = "peer:" + options.peer_id;
    ctx.AddMetadata("x-st-capability", EncodeLowerHex(MintToken(options.capability_key, cap)));
  }
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  auto reader = stub->FetchInfofile(&ctx, req);
  storetorrent::v1::FetchInfofileChunk chunk;
  bool first = true;
  while (reader->Read(&chunk)) {
    if (first) {
      out->kind = chunk.kind();
      out->file_id = chunk.file_id();
      out->generation = chunk.generation();
      out->position = chunk.position();
      out->log_id = chunk.log_id();
      out->total_size = chunk.total_size();
      out->crc32c = chunk.crc32c();
      first = false;
    } else {
      out->data.push_back(chunk.data());
    }
  }
  grpc::Status st = reader->Finish();
  const std::string what = req.name().empty() ? FileIdText(req.file_id()) : req.name();
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
    out->failure = FetchFailure::kRefused;
    const auto& trailer = ctx.GetServerTrailingMetadata();
    auto kind = trailer.find(kErrorKindKey);
    if (kind != trailer.end() &&
        std::string(kind->second.data(), kind->second.size()) == kFileDeleted) {
      out->failure = FetchFailure::kDeleted;
    }
    return Status::NotFound("the tracker " + who + " has no " + what + ": " + st.error_message());
  }
  if (!st.ok()) {
    out->failure = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                       ? FetchFailure::kUnreachable
                       : FetchFailure::kRefused;
    return Status::Unavailable("FetchInfofile of " + what + " from " + who +
                               " failed: " + st.error_message() + " (gRPC code " +
                               std::to_string(static_cast<int>(st.error_code())) + ")");
  }
  if (first) {
    out->failure = FetchFailure::kRefused;
    return Status::Unavailable("FetchInfofile of " + what + ": an empty reply");
  }
  return Status::OK();
}

}  // namespace

Status GrpcInfofileFetcher::Fetch(const std::string& name, uint64_t file_id, const CopyState& have,
                                  uint64_t want_generation, double deadline_s,
                                  FetchedInfofile* out) {
  storetorrent::v1::FetchInfofileRequest req;
  req.set_name(name);
  req.set_user("peer:" + options_.peer_id);
  req.set_file_id(file_id);
  req.set_have_generation(have.generation);
  req.set_have_position(have.position);
  req.set_have_log_id(have.log_id);
  req.set_have_schema(have.schema);
  req.set_want_generation(want_generation);
  if (want_generation == 0) {  // the tracker's latest: only it knows what it acknowledged
    return Call(impl_->stub.get(), options_.tracker, req, options_, deadline_s, out);
  }
  auto order = impl_->Order();
  if (order.empty())
    return Call(impl_->stub.get(), options_.tracker, req, options_, deadline_s, out);
  // A standby that has not applied the log as far as the copy refuses before reading anything.
  req.set_want_position(have.position);
  req.set_want_log_id(have.log_id);
  const Clock::time_point end =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000));
  for (const auto& [addr, stub] : order) {
    double budget = std::min(kStandbyTimeoutS, SecondsUntil(end) / 2);
    if (budget < 0.05) break;
    Status s = Call(stub.get(), addr, req, options_, budget, out);
    if (s.ok()) {
      std::string why = OlderThanWanted(*out, have, want_generation);
      if (why.empty()) {
        out->source = addr;
        return s;
      }
      ST_LOG_WARN("infofile copies: standby %s answered %s at %s: not used, asking the next",
                  addr.c_str(), Printable(name.empty() ? FileIdText(file_id) : name).c_str(),
                  why.c_str());
      continue;
    }
    if (out->failure == FetchFailure::kUnreachable) {
      {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl_->benched[addr] = Clock::now();
      }
      ST_LOG_INFO("infofile copies: standby %s did not answer (%s): not asked for %g s",
                  addr.c_str(), s.ToString().c_str(), kBenchS);
    } else {  // behind (replica-behind), or any other refusal: the next one knows
      ST_LOG_DEBUG("infofile copies: standby %s passed over: %s", addr.c_str(),
                   s.ToString().c_str());
    }
  }
  return Call(impl_->stub.get(), options_.tracker, req, options_, std::max(0.05, SecondsUntil(end)),
              out);
}

}  // namespace st
