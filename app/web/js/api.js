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

async function request(method, path, body, signal, asked = false) {
  let response;
  try {
    response = await fetch(path, {
      method,
      signal,
      headers: {
        ...keyHeaders(),
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (response.status === 401 && !asked) {
      const key = window.prompt("This Chunkwise service needs an API key (Bearer token):");
      if (key) {
        window.sessionStorage.setItem(KEY_STORAGE, key.trim());
        return request(method, path, body, signal, true);
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
  const type = response.headers.get("content-type") || "";
  let document = null;
  if (type.includes("json")) {
    try {
      document = await response.json();
    } catch {
      document = null;
    }
  }
  if (!response.ok) {
    throw new ApiError(
      document && typeof document === "object"
        ? { status: response.status, ...document }
        : {
            title: `HTTP ${response.status}`,
            detail: response.statusText || "unexpected response",
            status: response.status,
          },
    );
  }
  if (document === null) {
    throw new ApiError({ title: "Unexpected response", detail: `not JSON (${type})`, status: response.status });
  }
  return document;
}

export const getJson = (path, signal) => request("GET", path, undefined, signal);
export const postJson = (path, body, signal) => request("POST", path, body, signal);
