// JSON over fetch; every failure becomes an ApiError carrying the problem+json document.

export class ApiError extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || "Request failed");
    this.problem = problem;
  }
}

// With API keys configured (APP_API_KEYS), /v1 answers 401 without one: the dashboard then asks
// for the key once and keeps it in this tab's sessionStorage (never in the URL or a cookie).
const KEY_STORAGE = "chunkwise-api-key";

function keyHeaders() {
  const key = window.sessionStorage.getItem(KEY_STORAGE);
  return key ? { authorization: `Bearer ${key}` } : {};
}

/** fetch with the API key (asked for once on a 401); a network failure becomes an ApiError. */
async function send(method, path, { body, signal, headers = {} } = {}, asked = false) {
  let response;
  const sent = window.sessionStorage.getItem(KEY_STORAGE);
  try {
    response = await fetch(path, {
      method,
      signal,
      headers: {
        ...keyHeaders(),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401 && !asked) {
      // Requests sent together (the catalogs) are refused together: one prompt answers them.
      const stored = window.sessionStorage.getItem(KEY_STORAGE);
      if (stored && stored !== sent) return send(method, path, { body, signal, headers }, true);
      const key = window.prompt("This Chunkwise service needs an API key (Bearer token):");
      if (key) {
        window.sessionStorage.setItem(KEY_STORAGE, key.trim());
        return send(method, path, { body, signal, headers }, true);
      }
    }
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError({
      title: "The service could not be reached",
      detail: `${err.message || err}. Is the Chunkwise server running?`,
      status: 0,
    });
  }
  return response;
}

/** An answer that is not 2xx as an ApiError (its problem+json when it has one). */
function failure(response, document) {
  return new ApiError(
    document && typeof document === "object"
      ? { status: response.status, ...document }
      : {
          title: `HTTP ${response.status}`,
          detail: response.statusText || "unexpected response",
          status: response.status,
        },
  );
}

async function request(method, path, options) {
  const response = await send(method, path, options);
  const type = response.headers.get("content-type") || "";
  let document = null;
  if (type.includes("json")) {
    try {
      document = await response.json();
    } catch {
      document = null;
    }
  }
  if (!response.ok) throw failure(response, document);
  if (document === null) {
    throw new ApiError({ title: "Unexpected response", detail: `not JSON (${type})`, status: response.status });
  }
  return document;
}

export const getJson = (path, signal) => request("GET", path, { signal });
/** headers: extra request headers (an Idempotency-Key). */
export const postJson = (path, body, signal, headers) => request("POST", path, { body, signal, headers });
export const deleteJson = (path, signal) => request("DELETE", path, { signal });

/** A GET's body as a Blob (a file to download), with the API key like every request. */
export async function getBlob(path, signal) {
  const response = await send("GET", path, { signal });
  if (!response.ok) {
    const document = await response.json().catch(() => null);
    throw failure(response, document);
  }
  return response.blob();
}
