"""The API's routes, one module per resource; :func:`envcheck.api.app.create_app` mounts them."""
