#include "name_codec.h"

#include <gtest/gtest.h>

#include <string>

#include "crc32c.h"

namespace st {
namespace {

void ExpectSafeComponent(const std::string& enc) {
  EXPECT_EQ(std::string::npos, enc.find('/')) << enc;
  EXPECT_EQ(std::string::npos, enc.find('\0')) << enc;
  EXPECT_NE(".", enc);
  EXPECT_NE("..", enc);
  ASSERT_FALSE(enc.empty());
  EXPECT_NE('.', enc[0]) << enc;
  EXPECT_LE(enc.size(), kMaxEncodedName);
  std::string fname = RecordFileName(enc, 255, 0xffffffffu) + kSidecarSuffix;
  EXPECT_LE(fname.size(), 255u);
}

TEST(NameCodec, SafeNamesKept) {
  EXPECT_EQ("abc", EncodeName("abc"));
  EXPECT_EQ("A-Z_a.z-09", EncodeName("A-Z_a.z-09"));
  EXPECT_EQ("x..y", EncodeName("x..y"));
}

TEST(NameCodec, UnsafeBytesEscapedUpperCase) {
  EXPECT_EQ("JFK%2F2013-01-01", EncodeName("JFK/2013-01-01"));
  EXPECT_EQ("a%20b", EncodeName("a b"));
  EXPECT_EQ("%25", EncodeName("%"));
  EXPECT_EQ("%40%7E", EncodeName("@~"));
  EXPECT_EQ("%C3%A9", EncodeName("\xc3\xa9"));
  EXPECT_EQ("%FF%01", EncodeName("\xff\x01"));
}

TEST(NameCodec, DotsAndSlashes) {
  EXPECT_EQ("%2E", EncodeName("."));
  EXPECT_EQ("%2E.", EncodeName(".."));
  EXPECT_EQ("%2Ehidden", EncodeName(".hidden"));
  EXPECT_EQ("%2E.%2F..%2Fetc%2Fpasswd", EncodeName("../../etc/passwd"));
  EXPECT_EQ("%2F", EncodeName("/"));
  for (const char* n : {".", "..", "/", "../x", ".hidden", "a/../../b", "/etc/passwd"}) {
    ExpectSafeComponent(EncodeName(n));
  }
}

TEST(NameCodec, ValidateRecordName) {
  EXPECT_TRUE(ValidateRecordName("a").ok());
  EXPECT_TRUE(ValidateRecordName(std::string(4096, 'x')).ok());
  EXPECT_FALSE(ValidateRecordName("").ok());
  EXPECT_FALSE(ValidateRecordName(std::string(4097, 'x')).ok());
  EXPECT_FALSE(ValidateRecordName(std::string("a\0b", 3)).ok());
  EXPECT_TRUE(ValidateRecordName("..").ok());  // allowed: encoded safely
}

TEST(NameCodec, LongNamesHashed) {
  std::string exact(200, 'a');
  EXPECT_EQ(exact, EncodeName(exact));
  std::string longer(201, 'a');
  std::string enc = EncodeName(longer);
  EXPECT_TRUE(IsHashedEncoding(enc));
  EXPECT_EQ("~" + Sha256Hex(longer), enc);
  EXPECT_EQ(65u, enc.size());
  ExpectSafeComponent(enc);
  // 67 escaped bytes = 201 encoded bytes: hashed too.
  std::string escaped(67, '/');
  EXPECT_TRUE(IsHashedEncoding(EncodeName(escaped)));
  EXPECT_FALSE(IsHashedEncoding(EncodeName(std::string(66, '/'))));
  ExpectSafeComponent(EncodeName(std::string(4096, '\xff')));
  EXPECT_EQ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Sha256Hex(""));
}

TEST(NameCodec, DecodeIsInverseAndCanonical) {
  std::string all;
  for (int c = 1; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (const std::string& name : {std::string("abc"), std::string(".x"), std::string(".."),
                                  std::string("a/b c"), all.substr(0, 60), all.substr(100, 60)}) {
    std::string enc = EncodeName(name);
    ASSERT_FALSE(IsHashedEncoding(enc));
    std::string back;
    EXPECT_TRUE(DecodeEncodedName(enc, &back)) << enc;
    EXPECT_EQ(name, back);
  }
  std::string out;
  EXPECT_FALSE(DecodeEncodedName("%2f", &out));   // lower-case hex is not canonical
  EXPECT_FALSE(DecodeEncodedName("%41", &out));   // 'A' must be kept, not escaped
  EXPECT_FALSE(DecodeEncodedName(".x", &out));    // a leading '.' must be escaped
  EXPECT_FALSE(DecodeEncodedName("%2", &out));
  EXPECT_FALSE(DecodeEncodedName("a/b", &out));
  EXPECT_FALSE(DecodeEncodedName("%00", &out));   // NUL is never a name byte
  EXPECT_FALSE(DecodeEncodedName("", &out));
}

TEST(NameCodec, RecordFileNames) {
  EXPECT_EQ("a@0@00000000", RecordFileName("a", 0, 0));
  EXPECT_EQ("x%40y@12@deadbeef", RecordFileName("x%40y", 12, 0xdeadbeef));
  std::string_view enc;
  uint8_t rank;
  uint32_t crc;
  ASSERT_TRUE(ParseRecordFileName("x%40y@12@deadbeef", &enc, &rank, &crc));
  EXPECT_EQ("x%40y", enc);
  EXPECT_EQ(12, rank);
  EXPECT_EQ(0xdeadbeefu, crc);
  EXPECT_FALSE(ParseRecordFileName("a@0@0000000", &enc, &rank, &crc));
  EXPECT_FALSE(ParseRecordFileName("a@256@00000000", &enc, &rank, &crc));
  EXPECT_FALSE(ParseRecordFileName("a@01@00000000", &enc, &rank, &crc));
  EXPECT_FALSE(ParseRecordFileName("@0@00000000", &enc, &rank, &crc));
  EXPECT_FALSE(ParseRecordFileName("a@0@DEADBEEF", &enc, &rank, &crc));
  EXPECT_FALSE(ParseRecordFileName("a@0@00000000.name", &enc, &rank, &crc));
}

TEST(NameCodec, Bucket) { EXPECT_EQ(crc32c::Value("abc") & 0xff, NameBucket("abc")); }

TEST(NameCodec, ValidateFileName) {
  EXPECT_TRUE(ValidateFileName("/a").ok());
  EXPECT_TRUE(ValidateFileName("/a/b/c").ok());
  EXPECT_TRUE(ValidateFileName("/a/.b/c..").ok());
  EXPECT_FALSE(ValidateFileName("").ok());
  EXPECT_FALSE(ValidateFileName("/").ok());
  EXPECT_FALSE(ValidateFileName("a/b").ok());
  EXPECT_FALSE(ValidateFileName("/a//b").ok());
  EXPECT_FALSE(ValidateFileName("/a/").ok());
  EXPECT_FALSE(ValidateFileName("/a/./b").ok());
  EXPECT_FALSE(ValidateFileName("/a/../b").ok());
  EXPECT_FALSE(ValidateFileName("/..").ok());
  EXPECT_FALSE(ValidateFileName(std::string("/a\0b", 4)).ok());
}

}  // namespace
}  // namespace st
