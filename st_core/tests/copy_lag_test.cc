// How far a peer's infofile copies are behind the tracker (copy_lag.h; issue 40).
#include "copy_lag.h"

#include <gtest/gtest.h>

#include <vector>

namespace st {
namespace {

TEST(CopyLagTest, FilesNamedWithoutACopyOrWithAnOlderOneAreBehindLargestLagFirst) {
  CopyLag lag;
  EXPECT_EQ(lag.Get().caught_up_at, 0);  // never heard from the tracker: not "caught up"
  lag.CopyAt(1, 3, 10);
  EXPECT_EQ(lag.Get().caught_up_at, 0);
  lag.TrackerNamed({{1, "/a", 5}, {2, "/b", 2}, {3, "/c", 0}}, 11);
  CopyLag::Stats s = lag.Get();
  EXPECT_EQ(s.copies, 1u);
  EXPECT_EQ(s.behind, 3u);   // 1 is 2 behind, 2 and 3 have no copy (3 at generation 0 too)
  EXPECT_EQ(s.max_lag, 2u);  // a missing copy lags by the generation named
  EXPECT_EQ(s.caught_up_at, 0);
  std::vector<CopyLag::Named> b = lag.Behind(2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].name, "/a");  // lag 2, then /b (lag 2, named after), never more than asked
  EXPECT_EQ(b[1].name, "/b");

  lag.CopyAt(1, 5, 12);
  lag.CopyAt(2, 2, 13);
  lag.Unnamed(3, 14);  // the tracker has no such file any more
  s = lag.Get();
  EXPECT_EQ(s.copies, 2u);
  EXPECT_EQ(s.behind, 0u);
  EXPECT_EQ(s.max_lag, 0u);
  EXPECT_EQ(s.caught_up_at, 14);

  // A newer generation from a FetchInfofile reply raises what is named, an older one does not.
  lag.TrackerAt(1, 4, 15);
  EXPECT_EQ(lag.Get().behind, 0u);
  lag.TrackerAt(1, 9, 16);
  s = lag.Get();
  EXPECT_EQ(s.behind, 1u);
  EXPECT_EQ(s.max_lag, 4u);
  EXPECT_EQ(s.caught_up_at, 14);
  lag.TrackerNamed({{1, "", 7}}, 17);  // an older announce: kept at 9, the name kept too
  ASSERT_EQ(lag.Behind(10).size(), 1u);
  EXPECT_EQ(lag.Behind(10)[0].name, "/a");
  EXPECT_EQ(lag.Behind(10)[0].generation, 9u);
  lag.CopyRemoved(2, 18);  // still named: behind again
  EXPECT_EQ(lag.Get().behind, 2u);
  lag.CopyAt(2, 2, 19);
  lag.CopyAt(1, 9, 20);
  EXPECT_EQ(lag.Get().caught_up_at, 20);
  lag.TrackerNamed({}, 21);  // an announce reply naming nothing new: still all current
  EXPECT_EQ(lag.Get().caught_up_at, 21);
}

}  // namespace
}  // namespace st
