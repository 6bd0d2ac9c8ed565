// DecideScrub: which local records the scrubber removes (paper 3.1, 4.3).
#include "scrub.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace st {
namespace {

constexpr double kNow = 1'700'000'000;
constexpr double kAge = 3600;
constexpr double kOld = kNow - 2 * kAge;    // well past the scrub age
constexpr double kYoung = kNow - kAge / 2;  // a write possibly in flight

LocalRecord Rec(const std::string& name, uint8_t rank, double mtime) {
  LocalRecord r;
  r.name = name;
  r.copy_rank = rank;
  r.crc = 0x1234;
  r.mtime = mtime;
  return r;
}

std::vector<ScrubAction> Decide(const std::vector<LocalRecord>& local, InfofileState state,
                                const std::vector<CommittedCopy>& committed) {
  return DecideScrub(local, state, committed, kNow, kAge);
}

using A = ScrubAction;

TEST(Scrub, CommittedAtOwnRankKeptAtAnyAge) {
  std::vector<LocalRecord> local{Rec("a", 0, kOld), Rec("b", 1, kYoung), Rec("c", 2, 0),
                                 Rec("d", 0, kNow + 100)};
  std::vector<CommittedCopy> committed{{"a", 0}, {"b", 1}, {"c", 2}, {"d", 0}};
  EXPECT_EQ(std::vector<A>(4, A::kKeepCommitted), Decide(local, InfofileState::kRead, committed));
}

TEST(Scrub, UncommittedYoungKeptOldRemoved) {
  std::vector<LocalRecord> local{Rec("young", 0, kYoung), Rec("old", 0, kOld),
                                 Rec("committed", 0, kOld)};
  EXPECT_EQ((std::vector<A>{A::kKeepYoung, A::kRemoveUncommitted, A::kKeepCommitted}),
            Decide(local, InfofileState::kRead, {{"committed", 0}}));
}

TEST(Scrub, AgeBoundary) {
  // Exactly the scrub age old is old enough; a nanosecond less is not.
  std::vector<LocalRecord> local{Rec("edge", 0, kNow - kAge), Rec("inside", 0, kNow - kAge + 1e-3)};
  EXPECT_EQ((std::vector<A>{A::kRemoveUncommitted, A::kKeepYoung}),
            Decide(local, InfofileState::kRead, {}));
}

TEST(Scrub, FutureMtimeIsYoung) {
  // A clock step backwards must not make a fresh record look old.
  EXPECT_EQ(std::vector<A>{A::kKeepYoung},
            Decide({Rec("x", 0, kNow + 86400)}, InfofileState::kRead, {}));
}

TEST(Scrub, WrongRankRemovedWhenOld) {
  std::vector<LocalRecord> local{Rec("old", 0, kOld), Rec("young", 0, kYoung)};
  std::vector<CommittedCopy> committed{{"old", 1}, {"young", 2}};
  EXPECT_EQ((std::vector<A>{A::kRemoveWrongRank, A::kKeepYoung}),
            Decide(local, InfofileState::kRead, committed));
}

TEST(Scrub, CommittedElsewhereOnlyCountsForThisPeer) {
  // The committed list is this peer's; a copy committed to another peer at
  // rank 0 is not in it, so our rank-0 copy is stale.
  EXPECT_EQ(std::vector<A>{A::kRemoveUncommitted},
            Decide({Rec("r", 0, kOld)}, InfofileState::kRead, {{"other", 0}}));
}

TEST(Scrub, SeveralCommittedRanksKeepEach) {
  // An infofile breaking invariant 3 commits two ranks of one name here:
  // both are committed, neither is removed.
  std::vector<LocalRecord> local{Rec("n", 0, kOld), Rec("n", 1, kOld), Rec("n", 2, kOld)};
  std::vector<CommittedCopy> committed{{"n", 0}, {"n", 1}};
  EXPECT_EQ((std::vector<A>{A::kKeepCommitted, A::kKeepCommitted, A::kRemoveWrongRank}),
            Decide(local, InfofileState::kRead, committed));
}

TEST(Scrub, UnknownFileIdOldRecordsRemoved) {
  std::vector<LocalRecord> local{Rec("a", 0, kOld), Rec("b", 3, 0), Rec("c", 0, kYoung)};
  // The committed list is ignored when no infofile has the id.
  EXPECT_EQ((std::vector<A>{A::kRemoveDeletedFile, A::kRemoveDeletedFile, A::kKeepYoung}),
            Decide(local, InfofileState::kMissing, {{"a", 0}}));
}

TEST(Scrub, UnreadableInfofileRemovesNothing) {
  std::vector<LocalRecord> local{Rec("a", 0, kOld), Rec("b", 0, 0), Rec("c", 0, kYoung)};
  EXPECT_EQ(std::vector<A>(3, A::kKeepUnknown), Decide(local, InfofileState::kUnknown, {}));
  EXPECT_EQ(std::vector<A>(3, A::kKeepUnknown), Decide(local, InfofileState::kUnknown, {{"a", 1}}));
}

TEST(Scrub, ZeroAgeRemovesEverythingUncommitted) {
  std::vector<LocalRecord> local{Rec("a", 0, kNow), Rec("b", 0, kNow)};
  EXPECT_EQ((std::vector<A>{A::kKeepCommitted, A::kRemoveUncommitted}),
            DecideScrub(local, InfofileState::kRead, {{"a", 0}}, kNow, 0));
}

TEST(Scrub, EmptyInputs) {
  EXPECT_TRUE(Decide({}, InfofileState::kRead, {{"a", 0}}).empty());
  EXPECT_TRUE(Decide({}, InfofileState::kMissing, {}).empty());
  EXPECT_EQ(std::vector<A>{A::kRemoveUncommitted},
            Decide({Rec("a", 0, kOld)}, InfofileState::kRead, {}));
}

TEST(Scrub, NamesAreExactBytes) {
  // Binary names, and names that differ only in case or a trailing byte.
  std::string bin("a\0b", 3);
  std::vector<LocalRecord> local{Rec(bin, 0, kOld), Rec("A", 0, kOld), Rec("a", 0, kOld),
                                 Rec("a ", 0, kOld)};
  std::vector<CommittedCopy> committed{{bin, 0}, {"a", 0}};
  EXPECT_EQ((std::vector<A>{A::kKeepCommitted, A::kRemoveUncommitted, A::kKeepCommitted,
                            A::kRemoveUncommitted}),
            Decide(local, InfofileState::kRead, committed));
}

TEST(Scrub, ActionNames) {
  EXPECT_STREQ("keep-committed", ScrubActionName(A::kKeepCommitted));
  EXPECT_STREQ("remove-deleted-file", ScrubActionName(A::kRemoveDeletedFile));
  EXPECT_TRUE(IsRemoval(A::kRemoveWrongRank));
  EXPECT_FALSE(IsRemoval(A::kKeepYoung));
  EXPECT_FALSE(IsRemoval(A::kKeepUnknown));
}

// --metadata fetch: only the tracker's explicit word makes a file deleted.
TEST(Scrub, StateFromTrackerDeletedOnlyOnItsWord) {
  using F = FetchFailure;
  using S = InfofileState;
  EXPECT_EQ(S::kRead, StateFromTracker(Status::OK(), F::kNone));
  EXPECT_EQ(S::kMissing, StateFromTracker(Status::NotFound("deleted"), F::kDeleted));
  // A NOT_FOUND that does not say so: an id the tracker does not know (a standby that never
  // saw the file, a tracker state older than its deletions): not taken for deleted.
  EXPECT_EQ(S::kUnknown, StateFromTracker(Status::NotFound("no such id"), F::kRefused));
  EXPECT_EQ(S::kUnknown, StateFromTracker(Status::NotFound("no such id"), F::kNone));
  // Not in the peerlist any more, an unreachable tracker, a bad reply.
  EXPECT_EQ(S::kUnknown, StateFromTracker(Status::Unavailable("denied"), F::kRefused));
  EXPECT_EQ(S::kUnknown, StateFromTracker(Status::Unavailable("down"), F::kUnreachable));
  EXPECT_EQ(S::kUnknown, StateFromTracker(Status::Corruption("bad snapshot"), F::kRefused));
  // kDeleted with another status is not the tracker's NOT_FOUND.
  EXPECT_EQ(S::kUnknown, StateFromTracker(Status::Unavailable("?"), F::kDeleted));
}

}  // namespace
}  // namespace st
