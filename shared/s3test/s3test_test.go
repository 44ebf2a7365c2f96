package s3test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestTheGatewayStoresAndReturnsAnObject(t *testing.T) {
	srv := Start(t)
	bucket := srv.CreateBucket(t)
	c := srv.Client(t)
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b.txt"),
		Body: bytes.NewReader([]byte("hello"))}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("a/b.txt")})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Body.Close()
	if data, err := io.ReadAll(out.Body); err != nil || string(data) != "hello" {
		t.Errorf("read back %q (%v), want hello", data, err)
	}
}
