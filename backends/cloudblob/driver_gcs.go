//go:build !strata_nogcs

package cloudblob

// The gs:// driver. Build with -tags strata_nogcs to leave it (and the Google Cloud SDK, gRPC
// included) out of the binary.

import (
	"errors"

	_ "gocloud.dev/blob/gcsblob"
	"google.golang.org/api/googleapi"
)

func init() {
	statusOf = append(statusOf, func(err error) (int, string, bool) {
		var gErr *googleapi.Error
		if errors.As(err, &gErr) {
			return gErr.Code, "", true
		}
		return 0, "", false
	})
}
