package software

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mroce/mroce/endpoint"
	"github.com/mroce/mroce/engine"
	"github.com/mroce/mroce/memreg"
	"github.com/mroce/mroce/pathmgr"
)

// Every engine value the backend can meet becomes the API value of the
// same name, and back, so the two vocabularies agree value by value.
func TestConversionsKeepMeaning(t *testing.T) {
	for o := engine.OpWrite; o <= engine.OpRead; o++ {
		if a := apiOp(o); a.String() != o.String() || engineOp(a) != o {
			t.Errorf("opcode %v became %v", o, a)
		}
	}
	for s := engine.StatusOK; s <= engine.StatusLocalLength; s++ {
		if a := apiStatus(s); a.String() != s.String() {
			t.Errorf("status %v became %v", s, a)
		}
	}
	if a := apiStatus(engine.StatusLocalLength + 1); a == endpoint.StatusOK || a.String() != "Status(255)" {
		t.Errorf("an unknown engine status became %v", a)
	}
	for s := engine.Connecting; s <= engine.Closed; s++ {
		if a := apiConnState(s); a.String() != s.String() {
			t.Errorf("connection state %v became %v", s, a)
		}
	}
	for s := pathmgr.Good; s <= pathmgr.Down; s++ {
		if a := apiPathState(s); a.String() != s.String() {
			t.Errorf("path state %v became %v", s, a)
		}
	}
	for a := endpoint.Access(0); a < 16; a++ {
		if m := engineAccess(a); m.String() != a.String() {
			t.Errorf("access %v became %v", a, m)
		}
	}
}

// The engine's connection errors keep their message and gain the API's
// meaning; other errors pass unchanged.
func TestEngineErrorsGainTheAPIsMeaning(t *testing.T) {
	for _, c := range []struct{ engine, api error }{
		{engine.ErrClosed, endpoint.ErrClosed}, {engine.ErrTimeout, endpoint.ErrTimeout}, {engine.ErrConnectFailed, endpoint.ErrTimeout},
		{engine.ErrRefused, endpoint.ErrRefused}, {engine.ErrNotReady, endpoint.ErrNotReady},
	} {
		err := apiErr(fmt.Errorf("wrapped: %w", c.engine))
		if !errors.Is(err, c.api) || !errors.Is(err, c.engine) || err.Error() != "wrapped: "+c.engine.Error() {
			t.Errorf("%v became %v", c.engine, err)
		}
	}
	if err := apiErr(memreg.ErrBadKey); err != memreg.ErrBadKey {
		t.Errorf("an error without an API meaning became %v", err)
	}
	if apiErr(nil) != nil {
		t.Error("no error became one")
	}
}
