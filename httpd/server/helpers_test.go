package server

import "github.com/seed-c7a81618/conductor/httpd/internal/apitest"

// The shared test helpers (package apitest) under the names these tests use.
type (
	obj   = apitest.Obj
	mpRaw = apitest.MPRaw
)

var (
	mp          = apitest.MP
	seqTokens   = apitest.SeqTokens
	leBin       = apitest.LeBin
	jsonEnc     = apitest.JSONEnc
	quietLogger = apitest.QuietLogger
	waitFor     = apitest.WaitFor
)
