package weir_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/weirstream/weir/internal/s3test"
)

// bucketOf opens the bucket of an s3test server's checkpoint URL.
func bucketOf(t *testing.T, raw string) *blob.Bucket {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = ""
	b, err := blob.OpenBucket(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func listKeys(t *testing.T, b *blob.Bucket, prefix string) []string {
	t.Helper()
	var keys []string
	it := b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// TestRestoreOfAnS3CopyOnAnotherEndpointKeepsTheJobsCheckpoint: the rule of
// TestRestoreOfACopyWithoutSharedFilesKeepsTheJobsCheckpoint, for object
// storage. Two S3 servers (the job's, and a backup one, e.g. another MinIO)
// hold the same bucket and prefix; the URLs differ only in their endpoint
// query parameter. The first fix compared Describe(), which leaves out the
// query, so the copy on server B counted as the job's own storage on
// server A: the fallback ran and deleted A's intact checkpoint. Found by
// an outside review of session 34's fixes.
func TestRestoreOfAnS3CopyOnAnotherEndpointKeepsTheJobsCheckpoint(t *testing.T) {
	a := s3test.Start(t)
	bsrv := s3test.Start(t)
	dir := t.TempDir()
	o := wcInput(t, dir)
	o.Checkpoint.Dir = a.URL
	cancelAfter(t, o, 3)

	ba, bb := bucketOf(t, a.URL), bucketOf(t, bsrv.URL)
	keys := listKeys(t, ba, "weir/wordcount/")
	newest := -1
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, "weir/wordcount/chk-")
		if !ok || !strings.HasSuffix(rest, "/_metadata") {
			continue
		}
		if id, err := strconv.Atoi(strings.TrimSuffix(rest, "/_metadata")); err == nil && id > newest {
			newest = id
		}
	}
	if newest < 0 {
		t.Fatalf("no completed checkpoint on A: %v", keys)
	}
	if !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "/shared/") }) {
		t.Fatalf("no shared files: %v", keys)
	}
	// Copy chk-N alone (not the shared files) to server B.
	chk := fmt.Sprintf("weir/wordcount/chk-%d/", newest)
	for _, k := range listKeys(t, ba, chk) {
		data, err := ba.ReadAll(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if err := bb.WriteAll(context.Background(), k, data, nil); err != nil {
			t.Fatal(err)
		}
	}
	u, _ := url.Parse(bsrv.URL)
	u.Path = "/" + strings.TrimSuffix(chk, "/")
	o.Restore = u.String()
	res, err := executeErr(t, o)
	if ok, _ := ba.Exists(context.Background(), chk+"_metadata"); !ok {
		t.Errorf("the job's own intact chk-%d on server A was deleted by the fallback of a restore of a copy on server B (%s): B taken for A", newest, o.Restore)
	}
	if err == nil || !strings.Contains(err.Error(), "does not fall back") {
		t.Errorf("restore of a damaged copy on another endpoint: err %v (attempts %d), want a refusal that does not fall back", err, res.Attempts)
	}
}
