//go:build !strata_nos3 && !strata_nogcs && !strata_noazblob

package cloudblob

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/aws/smithy-go"
	"google.golang.org/api/googleapi"

	is "github.com/stratalog/strata/indexedstorage"
)

// Each driver's SDK errors: 408, 429, 5xx and the throttling codes are transient; 403, 404 and 400
// are not; a caller's cancellation stays a cancellation.
func TestClassifyReadsEachSDKsErrors(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("blob (code=Unknown): %w", err) }
	for _, tc := range []struct {
		err       error
		transient bool
	}{
		{wrap(&googleapi.Error{Code: http.StatusServiceUnavailable}), true},
		{wrap(&googleapi.Error{Code: http.StatusTooManyRequests}), true},
		{wrap(&googleapi.Error{Code: http.StatusBadRequest}), false},
		{wrap(&azcore.ResponseError{StatusCode: http.StatusInternalServerError}), true},
		{wrap(&azcore.ResponseError{StatusCode: http.StatusServiceUnavailable, ErrorCode: "ServerBusy"}), true},
		{wrap(&azcore.ResponseError{StatusCode: http.StatusForbidden, ErrorCode: "AuthorizationFailure"}), false},
		{wrap(&smithy.GenericAPIError{Code: "SlowDown"}), true},
		{wrap(&smithy.GenericAPIError{Code: "AccessDenied"}), false},
		{wrap(errors.New("something else")), false},
	} {
		if got := is.IsTransient(classify(tc.err)); got != tc.transient {
			t.Errorf("classify(%v): transient=%v, want %v", tc.err, got, tc.transient)
		}
	}
	if err := classify(wrap(context.Canceled)); is.IsTransient(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancellation became %v", err)
	}
}
