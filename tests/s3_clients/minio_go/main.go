// A check of StoreTorrent's S3 endpoint with MinIO's Go client (minio-go),
// which signs each chunk of a PUT's body over plain http
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, and -TRAILER with a checksum trailer
// for multipart parts). Run by tests/test_s3_minio_go.py:
//
//	s3check ENDPOINT ACCESS SECRET BUCKET [put-only]
//
// It writes objects, reads them back, lists and deletes, and prints one
// line per step ("put small 1000 <sha256>" ...); any error exits 1 with
// the error on stderr. With put-only it only PUTs one object into an
// existing BUCKET (no request before it).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func must(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// body is n deterministic bytes (so the Python side can make them too).
func body(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

func main() {
	if len(os.Args) != 5 && !(len(os.Args) == 6 && os.Args[5] == "put-only") {
		fmt.Fprintln(os.Stderr, "usage: s3check ENDPOINT ACCESS SECRET BUCKET [put-only]")
		os.Exit(2)
	}
	endpoint, access, secret, bucket := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	ctx := context.Background()
	c, err := minio.New(endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(access, secret, ""), Secure: false, Region: "us-east-1",
		TrailingHeaders: true, // parts: signed chunks, then a signed checksum trailer
	})
	must(err, "client")
	if len(os.Args) == 6 {
		data := body(300_000, 5)
		_, err := c.PutObject(ctx, bucket, "go/put-only.bin", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
		must(err, "put go/put-only.bin")
		fmt.Println("put go/put-only.bin")
		return
	}
	exists, err := c.BucketExists(ctx, bucket)
	must(err, "bucket exists")
	if !exists {
		must(c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}), "make bucket")
	}
	objects := []struct {
		key  string
		data []byte
		opts minio.PutObjectOptions
	}{
		{"go/small.bin", body(1000, 1), minio.PutObjectOptions{ContentType: "text/plain"}},
		{"go/empty.bin", body(0, 2), minio.PutObjectOptions{}},
		{"go/chunks.bin", body(300_000, 3), minio.PutObjectOptions{}},                       // several 64 KiB signed chunks
		{"go/multipart.bin", body(11<<20+17, 4), minio.PutObjectOptions{PartSize: 5 << 20}}, // parts with a signed CRC trailer
	}
	for _, o := range objects {
		info, err := c.PutObject(ctx, bucket, o.key, bytes.NewReader(o.data), int64(len(o.data)), o.opts)
		must(err, "put "+o.key)
		fmt.Printf("put %s %d %s\n", o.key, info.Size, digest(o.data))
	}
	for _, o := range objects {
		r, err := c.GetObject(ctx, bucket, o.key, minio.GetObjectOptions{})
		must(err, "get "+o.key)
		got, err := io.ReadAll(r)
		must(err, "read "+o.key)
		if !bytes.Equal(got, o.data) {
			fmt.Fprintf(os.Stderr, "get %s: %d bytes back, not the %d put\n", o.key, len(got), len(o.data))
			os.Exit(1)
		}
		fmt.Printf("get %s %d %s\n", o.key, len(got), digest(got))
	}
	for info := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "go/", Recursive: true}) {
		must(info.Err, "list")
		fmt.Printf("list %s %d\n", info.Key, info.Size)
	}
	must(c.RemoveObject(ctx, bucket, "go/empty.bin", minio.RemoveObjectOptions{}), "remove")
	fmt.Println("removed go/empty.bin")
}
