package web

import (
	"embed"
	"io/fs"
	"net/http"
)

// The UI's built assets: `npm ci && npm run build` in ui/ writes them
// (ui/README.md); they are committed, so the Go build never needs npm.
//
//go:embed ui/dist
var dist embed.FS

// uiHandler serves the page at / and its assets under /assets/.
func uiHandler(mux *http.ServeMux) {
	assets, err := fs.Sub(dist, "ui/dist")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'")
		http.ServeFileFS(w, r, assets, "index.html")
	})
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
}
