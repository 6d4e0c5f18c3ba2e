/*
 * A stand-in for the agent's native CJK tokenizer, for tests only: it registers FTS5's own
 * unicode61 tokenizer under the agent's name, cjk_unicode61. What matters to the tests is the
 * name: an FTS5 table declared with it can be read and written only on a connection that loaded
 * a library registering it, exactly as with the agent's libfts5_cjk.so.
 */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

static fts5_api *fts5_api_of(sqlite3 *db) {
    fts5_api *api = 0;
    sqlite3_stmt *stmt = 0;
    if (sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &stmt, 0) == SQLITE_OK) {
        sqlite3_bind_pointer(stmt, 1, (void *)&api, "fts5_api_ptr", 0);
        sqlite3_step(stmt);
    }
    sqlite3_finalize(stmt);
    return api;
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_extension_init(sqlite3 *db, char **error, const sqlite3_api_routines *routines) {
    SQLITE_EXTENSION_INIT2(routines);
    fts5_api *api = fts5_api_of(db);
    void *context = 0;
    fts5_tokenizer tokenizer;
    if (api == 0) {
        *error = sqlite3_mprintf("FTS5 is not available");
        return SQLITE_ERROR;
    }
    if (api->xFindTokenizer(api, "unicode61", &context, &tokenizer) != SQLITE_OK) {
        *error = sqlite3_mprintf("unicode61 is not available");
        return SQLITE_ERROR;
    }
    return api->xCreateTokenizer(api, "cjk_unicode61", context, &tokenizer, 0);
}
