package cloudblob

// The mem:// driver, gocloud's in-process bucket: small, always there.
import _ "gocloud.dev/blob/memblob"
