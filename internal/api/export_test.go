package api

// NewRouter exposes newRouter to the external tests, which walk its routes.
var NewRouter = newRouter
