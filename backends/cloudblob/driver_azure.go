//go:build !strata_noazblob

package cloudblob

// The azblob:// driver. Build with -tags strata_noazblob to leave it (and the Azure SDK) out of the
// binary.

import (
	"errors"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	_ "gocloud.dev/blob/azureblob"
)

func init() {
	statusOf = append(statusOf, func(err error) (int, string, bool) {
		var azErr *azcore.ResponseError
		if errors.As(err, &azErr) {
			return azErr.StatusCode, azErr.ErrorCode, true
		}
		return 0, "", false
	})
}
