#include "infofile_fetch_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>

#include "announcer.h"
#include "capability.h"
#include "coding.h"
#include "storetorrent/v1/tracker.grpc.pb.h"

namespace st {
namespace {

// The tracker's kind of refusal (st_py/errors.py ERROR_KIND_KEY) and the one
// that says a file id's file was deleted (st_py/tracker/rpc/fetch_rpc.py).
constexpr char kErrorKindKey[] = "st-error";
constexpr char kFileDeleted[] = "file-deleted";

std::string FileIdText(uint64_t file_id) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "file id %016llx", static_cast<unsigned long long>(file_id));
  return buf;
}

}  // namespace

struct GrpcInfofileFetcher::Impl {
  std::unique_ptr<storetorrent::v1::Tracker::Stub> stub;
};

GrpcInfofileFetcher::GrpcInfofileFetcher(FetchClientOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  grpc::ChannelArguments args;
  // A tracker restarting must not leave the peer backing off for minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options_.ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.ca_pem;
    ssl.pem_cert_chain = options_.cert_pem;
    ssl.pem_private_key = options_.key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  impl_->stub =
      storetorrent::v1::Tracker::NewStub(grpc::CreateCustomChannel(TrackerTarget(options_.tracker),
                                                                   creds, args));
}

GrpcInfofileFetcher::~GrpcInfofileFetcher() = default;

Status GrpcInfofileFetcher::Fetch(const std::string& name, uint64_t file_id, const CopyState& have,
                                  uint64_t want_generation, double deadline_s,
                                  FetchedInfofile* out) {
  *out = FetchedInfofile();
  storetorrent::v1::FetchInfofileRequest req;
  req.set_name(name);
  req.set_user("peer:" + options_.peer_id);
  req.set_file_id(file_id);
  req.set_have_generation(have.generation);
  req.set_have_position(have.position);
  req.set_have_log_id(have.log_id);
  req.set_have_schema(have.schema);
  req.set_want_generation(want_generation);
  grpc::ClientContext ctx;
  if (!options_.capability_key.empty()) {
    Capability cap;
    cap.ops = kOpPeer;
    cap.expires = UnixNow() + 300;
    cap.user = "peer:" + options_.peer_id;
    ctx.AddMetadata("x-st-capability", EncodeLowerHex(MintToken(options_.capability_key, cap)));
  }
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(deadline_s * 1000)));
  auto reader = impl_->stub->FetchInfofile(&ctx, req);
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
  const std::string what = name.empty() ? FileIdText(file_id) : name;
  if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
    out->failure = FetchFailure::kRefused;
    const auto& trailer = ctx.GetServerTrailingMetadata();
    auto kind = trailer.find(kErrorKindKey);
    if (kind != trailer.end() &&
        std::string(kind->second.data(), kind->second.size()) == kFileDeleted) {
      out->failure = FetchFailure::kDeleted;
    }
    return Status::NotFound("the tracker " + options_.tracker + " has no " + what + ": " +
                            st.error_message());
  }
  if (!st.ok()) {
    out->failure = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                       ? FetchFailure::kUnreachable
                       : FetchFailure::kRefused;
    return Status::Unavailable("FetchInfofile of " + what + " from " + options_.tracker +
                               " failed: " + st.error_message() + " (gRPC code " +
                               std::to_string(static_cast<int>(st.error_code())) + ")");
  }
  if (first) {
    out->failure = FetchFailure::kRefused;
    return Status::Unavailable("FetchInfofile of " + what + ": an empty reply");
  }
  return Status::OK();
}

}  // namespace st
