module github.com/dkv-io/dkv/tests/browser

go 1.26.0

require github.com/chromedp/chromedp v0.23.0

require (
	github.com/chromedp/cdproto v0.159.0
	github.com/dkv-io/dkv v0.0.0
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)

replace github.com/dkv-io/dkv => ../..
