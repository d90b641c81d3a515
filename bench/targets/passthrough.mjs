// The floor of what any worker costs: forwards the request to the origin, nothing else.
export default {
  fetch(req, env) {
    const u = new URL(req.url);
    return fetch(env.ORIGIN_URL + u.pathname + u.search, req);
  },
};
