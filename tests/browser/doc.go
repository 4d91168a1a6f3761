// Package browser drives DKV's web dashboard (/ui/, docs/dashboard.md) in
// a real headless Chromium against a 3-member cluster built from this
// repository. It is a module of its own so that the main module never
// depends on a browser driver.
//
//	cd tests/browser && go test -count=1 ./...
//
// Without chromium the tests skip with a message, or fail when CI=true.
package browser
