//go:build !strata_nos3

package cloudblob

// The s3:// driver. Build with -tags strata_nos3 to leave it (and the AWS SDK) out of the binary.

import (
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"
)

func init() {
	statusOf = append(statusOf, func(err error) (int, string, bool) {
		status, code, ok := 0, "", false
		var withStatus interface{ HTTPStatusCode() int } // smithy-go's (AWS SDK v2) response errors
		if errors.As(err, &withStatus) {
			status, ok = withStatus.HTTPStatusCode(), true
		}
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) {
			code, ok = apiErr.ErrorCode(), true
		}
		return status, code, ok
	})
}

func init() {
	// A ranged GetObject answered without a Content-Range is the whole object from its first byte.
	rangeIgnored = append(rangeIgnored, func(r *blob.Reader) bool {
		var out s3.GetObjectOutput
		return r.As(&out) && out.ContentRange == nil
	})
}
