package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
)

const secret = "hunter2-secret"

func TestStringHidesEverySecretForm(t *testing.T) {
	for _, in := range []string{
		"postgres://postgres:" + secret + "@127.0.0.1:5432/test?sslmode=disable",
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable&password=" + secret,
		"postgres://postgres@127.0.0.1:5432/test?PASSWORD=" + secret + "&sslmode=disable",
		"postgres://h/db?sslpassword=" + secret,
		"s3://bucket?access_key=AK&secret_access_key=" + secret + "&region=x",
		"https://b.s3.amazonaws.com/k?X-Amz-Security-Token=" + secret + "&X-Amz-Signature=" + secret,
		"azblob://c?sig=" + secret,
		"redis://:" + secret + "@127.0.0.1:6379/0",
		"redis://127.0.0.1:6379/0?token=" + secret,
		"host=127.0.0.1 user=postgres password=" + secret + " dbname=test",
		"host=127.0.0.1 password = '" + secret + " with \\' quote' dbname=test",
		`failed to connect to "postgres://u:` + secret + `@h/db": refused`,
		"cannot parse `host=h password=" + secret + "`: bad",
		"secret=" + secret,
	} {
		out := String(in)
		if strings.Contains(out, secret) || strings.Contains(out, "quote") {
			t.Errorf("String(%q) = %q", in, out)
		}
		if u := URL(in); strings.Contains(u, secret) {
			t.Errorf("URL(%q) = %q", in, u)
		}
	}
}

func TestStringKeepsWhatIsNotSecret(t *testing.T) {
	for _, in := range []string{
		"postgres://postgres@127.0.0.1:5432/test?sslmode=disable&schema=s",
		"sqlite:///var/lib/strata/strata.db",
		"redis://127.0.0.1:6379/0?prefix=token-x",
		"fs:///data/blobs",
		"sweep.page_size -1: want 1 to 10000",
	} {
		if out := String(in); out != in {
			t.Errorf("String(%q) = %q", in, out)
		}
	}
	if got, want := String("postgres://u:p@h/db?password=x&sslmode=disable"), "postgres://u:xxxxx@h/db?password=xxxxx&sslmode=disable"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestURLHidesAPasswordThePatternsMiss(t *testing.T) {
	in := "postgres://u:a%2F" + secret + "@h/db"
	if out := URL(in); strings.Contains(out, secret) {
		t.Fatal(out)
	}
	if out := URL("postgres://u:" + secret + "@h/%zz"); strings.Contains(out, secret) {
		t.Fatal(out)
	}
}

func TestErrorKeepsTheChain(t *testing.T) {
	base := fmt.Errorf("open postgres://u:%s@h/db?password=%s: %w", secret, secret, fs.ErrNotExist)
	err := Error(base)
	if strings.Contains(err.Error(), secret) {
		t.Fatal(err)
	}
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, base) {
		t.Fatal("errors.Is lost the chain")
	}
	if Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
	if wrapped := fmt.Errorf("storage.url: %w", err); strings.Contains(Error(wrapped).Error(), secret) {
		t.Fatal(wrapped)
	}
}

func TestHandlerHidesSecretsInEveryAttribute(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil))).With("storage", "postgres://u:"+secret+"@h/db")
	log.Info("open failed: password="+secret, "err", errors.New("dial password="+secret),
		slog.Group("g", "url", "redis://:"+secret+"@h"))
	if strings.Contains(buf.String(), secret) || !strings.Contains(buf.String(), Mask) {
		t.Fatal(buf.String())
	}
}
