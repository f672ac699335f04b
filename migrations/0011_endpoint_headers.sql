-- Endpoint headers: name -> value pairs sent with every delivery to the
-- endpoint (an API key its receiver expects, a routing hint). The API
-- bounds and vets them; endpoints stored before this migration send none.

ALTER TABLE endpoints
    ADD COLUMN headers jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object');
